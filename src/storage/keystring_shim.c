/*
 * keystring_shim.c -- the index layer's single door to KeyString encoding. Until
 * bson/keystring.h lands on main this file carries a stand-in encoder with the same
 * properties (bytewise order = MongoDB's canonical BSON order, prefix-free components,
 * descending = inverted bytes); then it forwards to shl_keystring_append_value /
 * shl_keystring_append_record_id and the stand-in goes away. TODO(#3)
 */
#include "storage/storage_private.h"

#include <math.h>
#include <string.h>

void
shl_kbuf_init(shl_kbuf_t *b)
{
    b->data = NULL;
    b->len = b->cap = 0;
}

void
shl_kbuf_cleanup(shl_kbuf_t *b)
{
    bson_free(b->data);
    shl_kbuf_init(b);
}

void
shl_kbuf_append(shl_kbuf_t *b, const void *p, size_t n)
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

static void
put_byte(shl_kbuf_t *b, uint8_t c)
{
    shl_kbuf_append(b, &c, 1);
}

static void
put_u64(shl_kbuf_t *b, uint64_t v)
{
    uint8_t be[8];
    for (int i = 0; i < 8; i++) {
        be[i] = (uint8_t)(v >> (56 - 8 * i));
    }
    shl_kbuf_append(b, be, 8);
}

/* Strings: 0x00 escaped as 0x00 0xFF, ended by 0x00 0x01 -- prefix-free and ordered. */
static void
put_str(shl_kbuf_t *b, const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        put_byte(b, (uint8_t)s[i]);
        if (s[i] == '\0') {
            put_byte(b, 0xFF);
        }
    }
    put_byte(b, 0x00);
    put_byte(b, 0x01);
}

/* Canonical type brackets (MongoDB's order); all numbers share one. */
enum {
    CT_MINKEY = 10,
    CT_UNDEFINED = 15,
    CT_NULL = 20,
    CT_NUMBER = 30,
    CT_STRING = 60,
    CT_OBJECT = 70,
    CT_ARRAY = 80,
    CT_BINDATA = 90,
    CT_OID = 100,
    CT_BOOL = 110,
    CT_DATE = 120,
    CT_TIMESTAMP = 130,
    CT_REGEX = 140,
    CT_DBPOINTER = 150,
    CT_CODE = 160,
    CT_CODEWSCOPE = 170,
    CT_MAXKEY = 240,
};

static uint64_t
sortable_double(double d)
{
    uint64_t bits;
    if (d == 0) {
        d = 0; /* -0 == 0 */
    }
    memcpy(&bits, &d, 8);
    return (bits & 0x8000000000000000ull) ? ~bits : bits | 0x8000000000000000ull;
}

/* Numbers: NaN first, then (double value, exact int64 remainder) so that int64s
 * beyond 2^53 stay distinct and 5 == 5.0 == NumberLong(5). */
static void
put_number(shl_kbuf_t *b, double d, int64_t rem)
{
    if (isnan(d)) {
        put_byte(b, 0x00);
        return;
    }
    put_byte(b, 0x01);
    put_u64(b, sortable_double(d));
    put_u64(b, (uint64_t)rem ^ 0x8000000000000000ull);
}

static void put_value(shl_kbuf_t *b, const bson_value_t *v);

static void
put_doc(shl_kbuf_t *b, const uint8_t *data, uint32_t len, bool with_names)
{
    bson_t doc;
    bson_iter_t it;

    if (bson_init_static(&doc, data, len) && bson_iter_init(&it, &doc)) {
        while (bson_iter_next(&it)) {
            const bson_value_t *ev = bson_iter_value(&it);
            shl_kbuf_t tmp;
            shl_kbuf_init(&tmp);
            put_value(&tmp, ev);
            /* canonical type byte, then the name, then the value body */
            put_byte(b, tmp.data[0]);
            if (with_names) {
                put_str(b, bson_iter_key(&it), strlen(bson_iter_key(&it)));
            }
            shl_kbuf_append(b, tmp.data + 1, tmp.len - 1);
            shl_kbuf_cleanup(&tmp);
        }
    }
    put_byte(b, 0x00);
}

static void
put_value(shl_kbuf_t *b, const bson_value_t *v)
{
    switch (v->value_type) {
    case BSON_TYPE_MINKEY:
        put_byte(b, CT_MINKEY);
        break;
    case BSON_TYPE_UNDEFINED:
        put_byte(b, CT_UNDEFINED);
        break;
    case BSON_TYPE_NULL:
        put_byte(b, CT_NULL);
        break;
    case BSON_TYPE_INT32:
        put_byte(b, CT_NUMBER);
        put_number(b, (double)v->value.v_int32, 0);
        break;
    case BSON_TYPE_INT64: {
        int64_t i = v->value.v_int64;
        double d = (double)i;
        int64_t rem = 0;
        if (d < 9.2e18 && d > -9.2e18) {
            rem = i - (int64_t)d;
        } else {
            rem = d > 0 ? i - INT64_MAX : i - INT64_MIN;
        }
        put_byte(b, CT_NUMBER);
        put_number(b, d, rem);
        break;
    }
    case BSON_TYPE_DOUBLE:
        put_byte(b, CT_NUMBER);
        put_number(b, v->value.v_double, 0);
        break;
    case BSON_TYPE_DECIMAL128: {
        char str[BSON_DECIMAL128_STRING];
        bson_decimal128_to_string(&v->value.v_decimal128, str);
        put_byte(b, CT_NUMBER);
        put_number(b, strtod(str, NULL), 0);
        break;
    }
    case BSON_TYPE_UTF8:
        put_byte(b, CT_STRING);
        put_str(b, v->value.v_utf8.str, v->value.v_utf8.len);
        break;
    case BSON_TYPE_SYMBOL:
        put_byte(b, CT_STRING);
        put_str(b, v->value.v_symbol.symbol, v->value.v_symbol.len);
        break;
    case BSON_TYPE_DOCUMENT:
        put_byte(b, CT_OBJECT);
        put_doc(b, v->value.v_doc.data, v->value.v_doc.data_len, true);
        break;
    case BSON_TYPE_ARRAY:
        put_byte(b, CT_ARRAY);
        put_doc(b, v->value.v_doc.data, v->value.v_doc.data_len, false);
        break;
    case BSON_TYPE_BINARY: {
        uint8_t sub = (uint8_t)v->value.v_binary.subtype;
        put_byte(b, CT_BINDATA);
        put_u64(b, v->value.v_binary.data_len);
        put_byte(b, sub);
        shl_kbuf_append(b, v->value.v_binary.data, v->value.v_binary.data_len);
        break;
    }
    case BSON_TYPE_OID:
        put_byte(b, CT_OID);
        shl_kbuf_append(b, v->value.v_oid.bytes, 12);
        break;
    case BSON_TYPE_BOOL:
        put_byte(b, CT_BOOL);
        put_byte(b, v->value.v_bool ? 2 : 1);
        break;
    case BSON_TYPE_DATE_TIME:
        put_byte(b, CT_DATE);
        put_u64(b, (uint64_t)v->value.v_datetime ^ 0x8000000000000000ull);
        break;
    case BSON_TYPE_TIMESTAMP:
        put_byte(b, CT_TIMESTAMP);
        put_u64(b, SHL_TS_MAKE(v->value.v_timestamp.timestamp, v->value.v_timestamp.increment));
        break;
    case BSON_TYPE_REGEX:
        put_byte(b, CT_REGEX);
        put_str(b, v->value.v_regex.regex, strlen(v->value.v_regex.regex));
        put_str(b, v->value.v_regex.options, strlen(v->value.v_regex.options));
        break;
    case BSON_TYPE_DBPOINTER:
        put_byte(b, CT_DBPOINTER);
        put_str(b, v->value.v_dbpointer.collection, v->value.v_dbpointer.collection_len);
        shl_kbuf_append(b, v->value.v_dbpointer.oid.bytes, 12);
        break;
    case BSON_TYPE_CODE:
        put_byte(b, CT_CODE);
        put_str(b, v->value.v_code.code, v->value.v_code.code_len);
        break;
    case BSON_TYPE_CODEWSCOPE:
        put_byte(b, CT_CODEWSCOPE);
        put_str(b, v->value.v_codewscope.code, v->value.v_codewscope.code_len);
        put_doc(b, v->value.v_codewscope.scope_data, v->value.v_codewscope.scope_len, true);
        break;
    case BSON_TYPE_MAXKEY:
    default:
        put_byte(b, CT_MAXKEY);
        break;
    }
}

void
shl_kbuf_value(shl_kbuf_t *b, const bson_value_t *v, bool descending)
{
    size_t start = b->len;
    put_value(b, v);
    if (descending) {
        for (size_t i = start; i < b->len; i++) {
            b->data[i] = (uint8_t)~b->data[i];
        }
    }
}

void
shl_kbuf_record_id(shl_kbuf_t *b, int64_t rid)
{
    put_u64(b, (uint64_t)rid ^ 0x8000000000000000ull);
}
