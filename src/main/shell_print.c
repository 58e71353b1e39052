/*
 * shell_print.c -- see shell_print.h. Follows the shape of mongosh's output (Node's
 * util.inspect, breakLength 80 minus the indent) closely enough that `shale status`
 * reads like sh.status(); it is not a byte-exact copy.
 */
#include "bson/bson_iter.h"
#include "main/shell_print.h"

#include <ctype.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#define LINE_WIDTH 72

static void render_value(bson_string_t *out, const bson_value_t *v, int indent);

static void
render_string(bson_string_t *out, const char *s, uint32_t len)
{
    /* util.inspect quotes with ' unless the text holds one and no ". */
    char q = (memchr(s, '\'', len) != NULL && memchr(s, '"', len) == NULL) ? '"' : '\'';

    bson_string_append_c(out, q);
    for (uint32_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == (unsigned char)q || c == '\\') {
            bson_string_append_c(out, '\\');
            bson_string_append_c(out, (char)c);
        } else if (c == '\n') {
            bson_string_append(out, "\\n");
        } else if (c == '\t') {
            bson_string_append(out, "\\t");
        } else if (c < 0x20) {
            bson_string_append_printf(out, "\\x%02X", c);
        } else {
            bson_string_append_c(out, (char)c);
        }
    }
    bson_string_append_c(out, q);
}

static bool
is_identifier(const char *k)
{
    if (!(isalpha((unsigned char)k[0]) || k[0] == '_' || k[0] == '$')) {
        return false;
    }
    for (const char *p = k + 1; *p; p++) {
        if (!(isalnum((unsigned char)*p) || *p == '_' || *p == '$')) {
            return false;
        }
    }
    return true;
}

static void
render_double(bson_string_t *out, double d)
{
    char buf[64];

    if (isnan(d)) {
        bson_string_append(out, "NaN");
    } else if (isinf(d)) {
        bson_string_append(out, d > 0 ? "Infinity" : "-Infinity");
    } else if (d == floor(d) && fabs(d) < 1e15) {
        /* JavaScript prints integral numbers without a fraction. */
        bson_string_append_printf(out, "%.0f", d);
    } else {
        for (int prec = 1; prec <= 17; prec++) {
            snprintf(buf, sizeof(buf), "%.*g", prec, d);
            if (strtod(buf, NULL) == d) {
                break;
            }
        }
        bson_string_append(out, buf);
    }
}

static void
render_binary(bson_string_t *out, const bson_value_t *v)
{
    const uint8_t *b = v->value.v_binary.data;
    uint32_t n = v->value.v_binary.data_len;

    if (v->value.v_binary.subtype == BSON_SUBTYPE_UUID && n == 16) {
        bson_string_append(out, "UUID('");
        for (uint32_t i = 0; i < n; i++) {
            bson_string_append_printf(out, "%02x", b[i]);
            if (i == 3 || i == 5 || i == 7 || i == 9) {
                bson_string_append_c(out, '-');
            }
        }
        bson_string_append(out, "')");
    } else {
        static const char tbl[] =
            "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        bson_string_append(out, "Binary.createFromBase64('");
        for (uint32_t i = 0; i < n; i += 3) {
            uint32_t w = (uint32_t)b[i] << 16;
            w |= i + 1 < n ? (uint32_t)b[i + 1] << 8 : 0;
            w |= i + 2 < n ? (uint32_t)b[i + 2] : 0;
            bson_string_append_c(out, tbl[(w >> 18) & 63]);
            bson_string_append_c(out, tbl[(w >> 12) & 63]);
            bson_string_append_c(out, i + 1 < n ? tbl[(w >> 6) & 63] : '=');
            bson_string_append_c(out, i + 2 < n ? tbl[w & 63] : '=');
        }
        bson_string_append_printf(out, "', %d)", (int)v->value.v_binary.subtype);
    }
}

static void
render_date(bson_string_t *out, int64_t ms)
{
    time_t secs = (time_t)(ms >= 0 ? ms / 1000 : (ms - 999) / 1000);
    int64_t frac = ms - (int64_t)secs * 1000;
    struct tm tm;
    char buf[64];

    gmtime_r(&secs, &tm);
    strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%S", &tm);
    bson_string_append_printf(out, "ISODate('%s.%03" PRId64 "Z')", buf, frac);
}

/* One document or array, on one line if it fits in the width left after 'indent'. */
static void
render_doc(bson_string_t *out, const uint8_t *data, uint32_t len, bool is_array, int indent)
{
    bson_t doc;
    bson_iter_t it;
    bson_string_t *flat;
    bool first = true, multi = false;

    if (!bson_init_static(&doc, data, len) || !bson_iter_init(&it, &doc)) {
        bson_string_append(out, is_array ? "[]" : "{}");
        return;
    }
    if (bson_empty(&doc)) {
        bson_string_append(out, is_array ? "[]" : "{}");
        return;
    }
    /* Try one line first; a nested value that broke across lines forces this one to. */
    flat = bson_string_new(is_array ? "[ " : "{ ");
    while (shl_iter_next(&it)) {
        if (!first) {
            bson_string_append(flat, ", ");
        }
        first = false;
        if (!is_array) {
            if (is_identifier(shl_iter_key(&it))) {
                bson_string_append(flat, shl_iter_key(&it));
            } else {
                render_string(flat, shl_iter_key(&it), (uint32_t)strlen(shl_iter_key(&it)));
            }
            bson_string_append(flat, ": ");
        }
        render_value(flat, bson_iter_value(&it), indent + 2);
    }
    bson_string_append(flat, is_array ? " ]" : " }");
    multi = strchr(flat->str, '\n') != NULL || (int)flat->len + indent > LINE_WIDTH;
    if (!multi) {
        bson_string_append(out, flat->str);
        bson_string_free(flat, true);
        return;
    }
    bson_string_free(flat, true);
    bson_string_append(out, is_array ? "[\n" : "{\n");
    first = true;
    bson_iter_init(&it, &doc);
    while (shl_iter_next(&it)) {
        if (!first) {
            bson_string_append(out, ",\n");
        }
        first = false;
        bson_string_append_printf(out, "%*s", indent + 2, "");
        if (!is_array) {
            if (is_identifier(shl_iter_key(&it))) {
                bson_string_append(out, shl_iter_key(&it));
            } else {
                render_string(out, shl_iter_key(&it), (uint32_t)strlen(shl_iter_key(&it)));
            }
            bson_string_append(out, ": ");
        }
        render_value(out, bson_iter_value(&it), indent + 2);
    }
    bson_string_append_printf(out, "\n%*s%c", indent, "", is_array ? ']' : '}');
}

static void
render_value(bson_string_t *out, const bson_value_t *v, int indent)
{
    char oid[25];

    switch (v->value_type) {
    case BSON_TYPE_DOUBLE:
        render_double(out, v->value.v_double);
        break;
    case BSON_TYPE_UTF8:
        render_string(out, v->value.v_utf8.str, v->value.v_utf8.len);
        break;
    case BSON_TYPE_DOCUMENT:
        render_doc(out, v->value.v_doc.data, v->value.v_doc.data_len, false, indent);
        break;
    case BSON_TYPE_ARRAY:
        render_doc(out, v->value.v_doc.data, v->value.v_doc.data_len, true, indent);
        break;
    case BSON_TYPE_BINARY:
        render_binary(out, v);
        break;
    case BSON_TYPE_UNDEFINED:
        bson_string_append(out, "undefined");
        break;
    case BSON_TYPE_OID:
        bson_oid_to_string(&v->value.v_oid, oid);
        bson_string_append_printf(out, "ObjectId('%s')", oid);
        break;
    case BSON_TYPE_BOOL:
        bson_string_append(out, v->value.v_bool ? "true" : "false");
        break;
    case BSON_TYPE_DATE_TIME:
        render_date(out, v->value.v_datetime);
        break;
    case BSON_TYPE_NULL:
        bson_string_append(out, "null");
        break;
    case BSON_TYPE_REGEX:
        bson_string_append_printf(out, "/%s/%s", v->value.v_regex.regex, v->value.v_regex.options);
        break;
    case BSON_TYPE_CODE:
        bson_string_append(out, "Code(");
        render_string(out, v->value.v_code.code, v->value.v_code.code_len);
        bson_string_append(out, ")");
        break;
    case BSON_TYPE_INT32:
        bson_string_append_printf(out, "%" PRId32, v->value.v_int32);
        break;
    case BSON_TYPE_TIMESTAMP:
        bson_string_append_printf(out, "Timestamp({ t: %" PRIu32 ", i: %" PRIu32 " })",
                                  v->value.v_timestamp.timestamp, v->value.v_timestamp.increment);
        break;
    case BSON_TYPE_INT64:
        bson_string_append_printf(out, "Long('%" PRId64 "')", v->value.v_int64);
        break;
    case BSON_TYPE_DECIMAL128: {
        char dec[BSON_DECIMAL128_STRING];
        bson_decimal128_to_string(&v->value.v_decimal128, dec);
        bson_string_append_printf(out, "Decimal128('%s')", dec);
        break;
    }
    case BSON_TYPE_MINKEY:
        bson_string_append(out, "MinKey()");
        break;
    case BSON_TYPE_MAXKEY:
        bson_string_append(out, "MaxKey()");
        break;
    default:
        bson_string_append_printf(out, "<BSON type %d>", (int)v->value_type);
        break;
    }
}

char *
shl_shell_doc_new(const bson_t *doc, bool is_array, int indent)
{
    bson_string_t *out = bson_string_new(NULL);

    render_doc(out, bson_get_data(doc), doc->len, is_array, indent);
    return bson_string_free(out, false);
}

char *
shl_shell_value_new(const bson_value_t *v, int indent)
{
    bson_string_t *out = bson_string_new(NULL);

    render_value(out, v, indent);
    return bson_string_free(out, false);
}
