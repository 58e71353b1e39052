/*
 * bson_util.c -- rendering, number conversions, ObjectId/UUID generation and append
 * helpers (bson_util.h).
 */
#include "bson/bson_iter.h"
#include "bson/bson_util.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "base/log.h"
#include "base/status.h"
#include "bson/bson_private.h"

/* ---- rendering (BSONObj::toString / BSONElement::toString, full = false) ---- */

#define TO_STRING_MAX_DEPTH 100

static void render_doc(bson_string_t *s, const uint8_t *data, uint32_t len, bool is_array,
                       int depth);

static void
append_bytes(bson_string_t *s, const char *p, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        bson_string_append_c(s, p[i]);
    }
}

static void
append_hex(bson_string_t *s, const uint8_t *p, size_t n, bool lower)
{
    const char *digits = lower ? "0123456789abcdef" : "0123456789ABCDEF";
    for (size_t i = 0; i < n; i++) {
        bson_string_append_c(s, digits[p[i] >> 4]);
        bson_string_append_c(s, digits[p[i] & 15]);
    }
}

static void
render_value(bson_string_t *s, const bson_value_t *v, int depth)
{
    char buf[64];

    switch (v->value_type) {
    case BSON_TYPE_DOCUMENT:
    case BSON_TYPE_ARRAY:
        render_doc(s, v->value.v_doc.data, v->value.v_doc.data_len,
                   v->value_type == BSON_TYPE_ARRAY, depth + 1);
        break;
    case BSON_TYPE_EOD:
        bson_string_append(s, "EOO");
        break;
    case BSON_TYPE_DATE_TIME:
        bson_string_append_printf(s, "new Date(%" PRId64 ")", v->value.v_datetime);
        break;
    case BSON_TYPE_REGEX:
        bson_string_append_printf(s, "/%s/%s", v->value.v_regex.regex, v->value.v_regex.options);
        break;
    case BSON_TYPE_DOUBLE:
        /* StringBuilder::appendDoubleNice: %.16g, plus ".0" unless it has '.', 'E' or 'N'. */
        snprintf(buf, sizeof(buf), "%.16g", v->value.v_double);
        bson_string_append(s, buf);
        if (!strchr(buf, '.') && !strchr(buf, 'E') && !strchr(buf, 'N')) {
            bson_string_append(s, ".0");
        }
        break;
    case BSON_TYPE_INT64:
        bson_string_append_printf(s, "%" PRId64, v->value.v_int64);
        break;
    case BSON_TYPE_INT32:
        bson_string_append_printf(s, "%" PRId32, v->value.v_int32);
        break;
    case BSON_TYPE_DECIMAL128: {
        char dec[BSON_DECIMAL128_STRING];
        bson_decimal128_to_string(&v->value.v_decimal128, dec);
        bson_string_append(s, dec);
        break;
    }
    case BSON_TYPE_BOOL:
        bson_string_append(s, v->value.v_bool ? "true" : "false");
        break;
    case BSON_TYPE_UNDEFINED:
        bson_string_append(s, "undefined");
        break;
    case BSON_TYPE_NULL:
        bson_string_append(s, "null");
        break;
    case BSON_TYPE_MAXKEY:
        bson_string_append(s, "MaxKey");
        break;
    case BSON_TYPE_MINKEY:
        bson_string_append(s, "MinKey");
        break;
    case BSON_TYPE_CODEWSCOPE:
        bson_string_append(s, "CodeWScope( ");
        append_bytes(s, v->value.v_codewscope.code, v->value.v_codewscope.code_len);
        bson_string_append(s, ", ");
        render_doc(s, v->value.v_codewscope.scope_data, v->value.v_codewscope.scope_len, false,
                   depth + 1);
        bson_string_append(s, ")");
        break;
    case BSON_TYPE_CODE:
        /* MongoDB cuts code whose size with the NUL exceeds 80 to 70 bytes and "...". */
        if (v->value.v_code.code_len + 1 > 80) {
            append_bytes(s, v->value.v_code.code, 70);
            bson_string_append(s, "...");
        } else {
            append_bytes(s, v->value.v_code.code, v->value.v_code.code_len);
        }
        break;
    case BSON_TYPE_UTF8:
    case BSON_TYPE_SYMBOL: {
        const char *str =
            v->value_type == BSON_TYPE_UTF8 ? v->value.v_utf8.str : v->value.v_symbol.symbol;
        uint32_t len =
            v->value_type == BSON_TYPE_UTF8 ? v->value.v_utf8.len : v->value.v_symbol.len;
        bson_string_append_c(s, '"');
        if (len + 1 > 160) {
            append_bytes(s, str, 150);
            bson_string_append(s, "...\"");
        } else {
            append_bytes(s, str, len);
            bson_string_append_c(s, '"');
        }
        break;
    }
    case BSON_TYPE_DBPOINTER:
        bson_string_append(s, "DBRef('");
        append_bytes(s, v->value.v_dbpointer.collection, v->value.v_dbpointer.collection_len);
        bson_string_append(s, "',");
        append_hex(s, v->value.v_dbpointer.oid.bytes, 12, true);
        bson_string_append(s, ")");
        break;
    case BSON_TYPE_OID:
        bson_string_append(s, "ObjectId('");
        append_hex(s, v->value.v_oid.bytes, 12, true);
        bson_string_append(s, "')");
        break;
    case BSON_TYPE_BINARY: {
        const uint8_t *d = v->value.v_binary.data;
        uint32_t len = v->value.v_binary.data_len;
        if (v->value.v_binary.subtype == BSON_SUBTYPE_UUID && len == 16) {
            bson_string_append(s, "UUID(\"");
            append_hex(s, d, 4, true);
            bson_string_append_c(s, '-');
            append_hex(s, d + 4, 2, true);
            bson_string_append_c(s, '-');
            append_hex(s, d + 6, 2, true);
            bson_string_append_c(s, '-');
            append_hex(s, d + 8, 2, true);
            bson_string_append_c(s, '-');
            append_hex(s, d + 10, 6, true);
            bson_string_append(s, "\")");
            break;
        }
        bson_string_append_printf(s, "BinData(%d, ", (int)v->value.v_binary.subtype);
        if (len > 80) {
            append_hex(s, d, 70, false);
            bson_string_append(s, "...)");
        } else {
            append_hex(s, d, len, false);
            bson_string_append(s, ")");
        }
        break;
    }
    case BSON_TYPE_TIMESTAMP:
        bson_string_append_printf(s, "Timestamp(%" PRIu32 ", %" PRIu32 ")",
                                  v->value.v_timestamp.timestamp, v->value.v_timestamp.increment);
        break;
    default:
        bson_string_append_printf(s, "?type=%d", (int)v->value_type);
        break;
    }
}

static void
render_doc(bson_string_t *s, const uint8_t *data, uint32_t len, bool is_array, int depth)
{
    bson_iter_t it;
    bool first = true;

    if (depth > TO_STRING_MAX_DEPTH) {
        bson_string_append(s, "...");
        return;
    }
    if (len <= 5 || !bson_iter_init_from_data(&it, data, len)) {
        bson_string_append(s, is_array ? "[]" : "{}");
        return;
    }
    bson_string_append(s, is_array ? "[ " : "{ ");
    while (shl_iter_next(&it)) {
        if (!first) {
            bson_string_append(s, ", ");
        }
        first = false;
        if (!is_array) {
            bson_string_append(s, shl_iter_key(&it));
            bson_string_append(s, ": ");
        }
        render_value(s, bson_iter_value(&it), depth);
    }
    bson_string_append(s, is_array ? " ]" : " }");
}

char *
shl_bson_to_string(const bson_t *doc)
{
    bson_string_t *s = bson_string_new(NULL);
    render_doc(s, bson_get_data(doc), doc->len, false, 0);
    return bson_string_free(s, false);
}

char *
shl_bson_value_to_string(const bson_value_t *v)
{
    bson_string_t *s = bson_string_new(NULL);
    render_value(s, v, 0);
    return bson_string_free(s, false);
}

char *
shl_bson_as_json(const bson_t *doc)
{
    char *json = bson_as_relaxed_extended_json(doc, NULL);

    /* libbson (1.23) renders nothing when a name or string is not UTF-8. */
    return json != NULL ? json : shl_log_json_from_bson(doc, false, NULL);
}

const char *
shl_bson_type_name(bson_type_t t)
{
    switch (t) {
    case BSON_TYPE_MINKEY:
        return "minKey";
    case BSON_TYPE_EOD:
        return "missing";
    case BSON_TYPE_DOUBLE:
        return "double";
    case BSON_TYPE_UTF8:
        return "string";
    case BSON_TYPE_DOCUMENT:
        return "object";
    case BSON_TYPE_ARRAY:
        return "array";
    case BSON_TYPE_BINARY:
        return "binData";
    case BSON_TYPE_UNDEFINED:
        return "undefined";
    case BSON_TYPE_OID:
        return "objectId";
    case BSON_TYPE_BOOL:
        return "bool";
    case BSON_TYPE_DATE_TIME:
        return "date";
    case BSON_TYPE_NULL:
        return "null";
    case BSON_TYPE_REGEX:
        return "regex";
    case BSON_TYPE_DBPOINTER:
        return "dbPointer";
    case BSON_TYPE_CODE:
        return "javascript";
    case BSON_TYPE_SYMBOL:
        return "symbol";
    case BSON_TYPE_CODEWSCOPE:
        return "javascriptWithScope";
    case BSON_TYPE_INT32:
        return "int";
    case BSON_TYPE_TIMESTAMP:
        return "timestamp";
    case BSON_TYPE_INT64:
        return "long";
    case BSON_TYPE_DECIMAL128:
        return "decimal";
    case BSON_TYPE_MAXKEY:
        return "maxKey";
    default:
        return "invalid";
    }
}

/* ---- numbers ---- */

bool
shl_bson_type_is_number(bson_type_t t)
{
    return t == BSON_TYPE_INT32 || t == BSON_TYPE_INT64 || t == BSON_TYPE_DOUBLE ||
           t == BSON_TYPE_DECIMAL128;
}

bool
shl_bson_value_as_int64_exact(const bson_value_t *v, int64_t *out)
{
    switch (v->value_type) {
    case BSON_TYPE_INT32:
        *out = v->value.v_int32;
        return true;
    case BSON_TYPE_INT64:
        *out = v->value.v_int64;
        return true;
    case BSON_TYPE_DOUBLE: {
        double d = v->value.v_double;
        if (isnan(d) || d >= 9223372036854775808.0 || d < -9223372036854775808.0 || d != trunc(d)) {
            return false;
        }
        *out = (int64_t)d;
        return true;
    }
    case BSON_TYPE_DECIMAL128: {
        shl_num_t n;
        bson_value_t canon;
        shl_num_from_decimal128(&v->value.v_decimal128, &n);
        if (!shl_num_to_value(&n, &canon)) {
            return false;
        }
        if (canon.value_type == BSON_TYPE_INT32) {
            *out = canon.value.v_int32;
            return true;
        }
        if (canon.value_type == BSON_TYPE_INT64) {
            *out = canon.value.v_int64;
            return true;
        }
        return false;
    }
    default:
        return false;
    }
}

int64_t
shl_bson_value_safe_int64(const bson_value_t *v)
{
    switch (v->value_type) {
    case BSON_TYPE_INT32:
        return v->value.v_int32;
    case BSON_TYPE_INT64:
        return v->value.v_int64;
    case BSON_TYPE_DOUBLE: {
        double d = v->value.v_double;
        if (isnan(d)) {
            return 0;
        }
        if (!(d < 9223372036854775808.0)) {
            return INT64_MAX;
        }
        if (d < -9223372036854775808.0) {
            return INT64_MIN;
        }
        return (int64_t)d;
    }
    case BSON_TYPE_DECIMAL128: {
        shl_num_t n;
        shl_num_from_decimal128(&v->value.v_decimal128, &n);
        return shl_num_to_int64_round(&n);
    }
    default:
        return 0;
    }
}

double
shl_bson_value_as_double(const bson_value_t *v)
{
    switch (v->value_type) {
    case BSON_TYPE_INT32:
        return v->value.v_int32;
    case BSON_TYPE_INT64:
        return (double)v->value.v_int64;
    case BSON_TYPE_DOUBLE:
        return v->value.v_double;
    case BSON_TYPE_DECIMAL128: {
        char str[BSON_DECIMAL128_STRING];
        bson_decimal128_to_string(&v->value.v_decimal128, str);
        return strtod(str, NULL); /* correctly rounded; parses NaN and Infinity too */
    }
    default:
        return 0;
    }
}

bool
shl_bson_value_true(const bson_value_t *v)
{
    switch (v->value_type) {
    case BSON_TYPE_INT32:
        return v->value.v_int32 != 0;
    case BSON_TYPE_INT64:
        return v->value.v_int64 != 0;
    case BSON_TYPE_DOUBLE:
        return v->value.v_double != 0; /* NaN is true */
    case BSON_TYPE_DECIMAL128: {
        shl_num_t n;
        shl_num_from_decimal128(&v->value.v_decimal128, &n);
        return n.cls != SHL_NUM_ZERO;
    }
    case BSON_TYPE_BOOL:
        return v->value.v_bool;
    case BSON_TYPE_EOD:
    case BSON_TYPE_NULL:
    case BSON_TYPE_UNDEFINED:
        return false;
    default:
        return true;
    }
}

/* ---- ObjectId, UUID, Timestamp ---- */

static pthread_once_t oid_once = PTHREAD_ONCE_INIT;
static bson_context_t *oid_context; /* written once under oid_once */

static void
oid_context_init(void)
{
    /* No pid cache: a forked child must not repeat its parent's ObjectIds. */
    oid_context = bson_context_new(BSON_CONTEXT_DISABLE_PID_CACHE);
}

void
shl_bson_oid_gen(bson_oid_t *oid)
{
    pthread_once(&oid_once, oid_context_init);
    bson_oid_init(oid, oid_context);
}

void
shl_uuid_gen(uint8_t uuid[16])
{
    size_t got = 0;
    while (got < 16) {
        ssize_t n = getrandom(uuid + got, 16 - got, 0);
        if (n < 0) {
            SHL_INVARIANT(errno == EINTR);
            continue;
        }
        got += (size_t)n;
    }
    uuid[6] = (uint8_t)((uuid[6] & 0x0F) | 0x40); /* version 4 */
    uuid[8] = (uint8_t)((uuid[8] & 0x3F) | 0x80); /* RFC 4122 variant */
}

bool
shl_bson_append_uuid(bson_t *doc, const char *key, const uint8_t uuid[16])
{
    return bson_append_binary(doc, key, -1, BSON_SUBTYPE_UUID, uuid, 16);
}

bool
shl_bson_iter_uuid(const bson_iter_t *it, uint8_t uuid[16])
{
    bson_subtype_t subtype;
    uint32_t len;
    const uint8_t *data;
    if (shl_iter_type(it) != BSON_TYPE_BINARY) {
        return false;
    }
    bson_iter_binary(it, &subtype, &len, &data);
    if (subtype != BSON_SUBTYPE_UUID || len != 16) {
        return false;
    }
    memcpy(uuid, data, 16);
    return true;
}

bool
shl_bson_append_timestamp_u64(bson_t *doc, const char *key, uint64_t ts)
{
    uint32_t t, i;
    shl_timestamp_unpack(ts, &t, &i);
    return bson_append_timestamp(doc, key, -1, t, i);
}

uint64_t
shl_bson_iter_timestamp_u64(const bson_iter_t *it)
{
    uint32_t t = 0, i = 0;
    if (shl_iter_type(it) == BSON_TYPE_TIMESTAMP) {
        bson_iter_timestamp(it, &t, &i);
    }
    return shl_timestamp_pack(t, i);
}

/* ---- appending ---- */

bool
shl_bson_append_value(bson_t *doc, const char *key, const bson_value_t *v)
{
    return bson_append_value(doc, key, -1, v);
}

bool
shl_bson_append_array_values(bson_t *doc, const char *key, const bson_value_t *vals, size_t n)
{
    bson_t arr;
    bool ok = true;
    if (!bson_append_array_begin(doc, key, -1, &arr)) {
        return false;
    }
    for (size_t i = 0; ok && i < n; i++) {
        char idx[16];
        const char *k;
        bson_uint32_to_string((uint32_t)i, &k, idx, sizeof(idx));
        ok = bson_append_value(&arr, k, -1, &vals[i]);
    }
    return bson_append_array_end(doc, &arr) && ok;
}

void
shl_bson_copy_fields_except(bson_t *dst, const bson_t *src, const char *const *skip)
{
    bson_iter_t it;
    if (!bson_iter_init(&it, src)) {
        return;
    }
    while (shl_iter_next(&it)) {
        bool skipped = false;
        for (size_t i = 0; skip && skip[i]; i++) {
            if (strcmp(skip[i], shl_iter_key(&it)) == 0) {
                skipped = true;
                break;
            }
        }
        if (!skipped) {
            bson_append_iter(dst, NULL, 0, &it);
        }
    }
}

bool
shl_bson_get_subdoc(const bson_t *b, const char *key, bson_t *view)
{
    bson_iter_t it;
    const uint8_t *data;
    uint32_t len;

    if (!bson_iter_init_find(&it, b, key) || !BSON_ITER_HOLDS_DOCUMENT(&it)) {
        return false;
    }
    bson_iter_document(&it, &len, &data);
    return bson_init_static(view, data, len);
}

bool
shl_bson_iter_view(const bson_iter_t *it, bson_t *view)
{
    const uint8_t *data;
    uint32_t len;

    if (BSON_ITER_HOLDS_DOCUMENT(it)) {
        bson_iter_document(it, &len, &data);
    } else if (BSON_ITER_HOLDS_ARRAY(it)) {
        bson_iter_array(it, &len, &data);
    } else {
        return false;
    }
    return bson_init_static(view, data, len);
}

bool
shl_bson_iter_find_key(bson_iter_t *it, const bson_t *doc, const char *key)
{
    bool found = false;

    if (bson_iter_init(it, doc)) {
        while (!found && shl_iter_next(it)) {
            const char *k = shl_iter_key(it);
            found = k[0] == key[0] && strcmp(k, key) == 0;
        }
    }
    return found;
}

bool
shl_bson_has_key(const bson_t *doc, const char *key)
{
    bson_iter_t it;
    return shl_bson_iter_find_key(&it, doc, key);
}

int64_t
shl_bson_int64_at(const bson_t *doc, const char *key)
{
    bson_iter_t it;
    return bson_iter_init_find(&it, doc, key) && BSON_ITER_HOLDS_NUMBER(&it)
               ? bson_iter_as_int64(&it)
               : 0;
}

double
shl_bson_double_at(const bson_t *doc, const char *key)
{
    bson_iter_t it;
    return bson_iter_init_find(&it, doc, key) && BSON_ITER_HOLDS_NUMBER(&it)
               ? bson_iter_as_double(&it)
               : 0.0;
}

size_t
shl_bson_array_element_len(uint32_t index, size_t value_len)
{
    size_t digits = 1;

    for (uint32_t i = index; i >= 10; i /= 10) {
        digits++;
    }
    return 1 + digits + 1 + value_len;
}

bool
shl_bson_array_has_room(const bson_t *arr, uint32_t index, size_t doc_len, size_t max_len)
{
    return index == 0 || arr->len + shl_bson_array_element_len(index, doc_len) <= max_len;
}

size_t
shl_bson_value_len(const bson_value_t *v)
{
    switch (v->value_type) {
    case BSON_TYPE_DOUBLE:
    case BSON_TYPE_DATE_TIME:
    case BSON_TYPE_TIMESTAMP:
    case BSON_TYPE_INT64:
        return 8;
    case BSON_TYPE_UTF8:
        return 4 + (size_t)v->value.v_utf8.len + 1;
    case BSON_TYPE_SYMBOL:
        return 4 + (size_t)v->value.v_symbol.len + 1;
    case BSON_TYPE_CODE:
        return 4 + (size_t)v->value.v_code.code_len + 1;
    case BSON_TYPE_DOCUMENT:
    case BSON_TYPE_ARRAY:
        return v->value.v_doc.data_len;
    case BSON_TYPE_BINARY:
        /* The old binary subtype repeats the length inside the data. */
        return 4 + 1 + (size_t)v->value.v_binary.data_len +
               (v->value.v_binary.subtype == BSON_SUBTYPE_BINARY_DEPRECATED ? 4 : 0);
    case BSON_TYPE_OID:
        return 12;
    case BSON_TYPE_BOOL:
        return 1;
    case BSON_TYPE_REGEX:
        return strlen(v->value.v_regex.regex) + 1 +
               (v->value.v_regex.options != NULL ? strlen(v->value.v_regex.options) : 0) + 1;
    case BSON_TYPE_DBPOINTER:
        return 4 + (size_t)v->value.v_dbpointer.collection_len + 1 + 12;
    case BSON_TYPE_CODEWSCOPE:
        return 4 + 4 + (size_t)v->value.v_codewscope.code_len + 1 + v->value.v_codewscope.scope_len;
    case BSON_TYPE_INT32:
        return 4;
    case BSON_TYPE_DECIMAL128:
        return 16;
    default: /* EOD, undefined, null, minKey, maxKey */
        return 0;
    }
}

const char *
shl_bson_binary_subtype_name(bson_subtype_t sub)
{
    switch (sub) {
    case BSON_SUBTYPE_BINARY:
        return "general";
    case BSON_SUBTYPE_FUNCTION:
        return "function";
    case BSON_SUBTYPE_BINARY_DEPRECATED:
        return "byte(deprecated)";
    case BSON_SUBTYPE_UUID_DEPRECATED:
        return "UUID(deprecated)";
    case BSON_SUBTYPE_UUID:
        return "UUID";
    case BSON_SUBTYPE_MD5:
        return "MD5";
    case BSON_SUBTYPE_ENCRYPTED:
        return "encrypt";
    default:
        return "Custom";
    }
}

/* The first '$'-prefixed key of the document or array at 'it' (recursing), or NULL. */
static const char *
dollar_key_in(bson_iter_t *it)
{
    const char *found = NULL;
    while (found == NULL && shl_iter_next(it)) {
        bson_iter_t sub;
        if (shl_iter_key(it)[0] == '$') {
            found = shl_iter_key(it);
        } else if ((BSON_ITER_HOLDS_DOCUMENT(it) || BSON_ITER_HOLDS_ARRAY(it)) &&
                   bson_iter_recurse(it, &sub)) {
            found = dollar_key_in(&sub);
        }
    }
    return found;
}

const char *
shl_bson_value_dollar_key(const bson_value_t *v)
{
    const char *found = NULL;
    bson_t view;
    bson_iter_t it;
    if ((v->value_type == BSON_TYPE_DOCUMENT || v->value_type == BSON_TYPE_ARRAY) &&
        bson_init_static(&view, v->value.v_doc.data, v->value.v_doc.data_len) &&
        bson_iter_init(&it, &view)) {
        found = dollar_key_in(&it);
    }
    return found;
}
