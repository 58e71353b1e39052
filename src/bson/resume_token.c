/*
 * resume_token.c -- see resume_token.h. MongoDB's KeyString V1 value encoding, for the value
 * types a resume token carries: each value is a type byte (its "ctype") and a body; an
 * object's element is the value's type byte, the field name (C string), then the value; an
 * array's element is the value; objects, arrays and strings end with 0x00 (a 0x00 inside a
 * string is 00 FF); the whole key ends with 0x04. Integers (and integral doubles below 2^53)
 * are a type byte saying sign and byte count, then (|v| << 1) big-endian (inverted when
 * negative). Other doubles and decimals are approximated (docs/design/change_streams.md).
 */
#include "bson/resume_token.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "base/status.h"
#include "bson/bson_iter.h"

enum {
    CT_MINKEY = 10,
    CT_UNDEFINED = 15,
    CT_NULL = 20,
    CT_NAN = 30,
    CT_NEG_LARGE = 31,
    CT_NEG_1BYTE = 39, /* 8 bytes: 32 */
    CT_NEG_SMALL = 40,
    CT_ZERO = 41,
    CT_POS_SMALL = 42,
    CT_POS_1BYTE = 43, /* 8 bytes: 50 */
    CT_POS_LARGE = 51,
    CT_STRING = 60,
    CT_OBJECT = 70,
    CT_ARRAY = 80,
    CT_BINDATA = 90,
    CT_OID = 100,
    CT_FALSE = 110,
    CT_TRUE = 111,
    CT_DATE = 120,
    CT_TIMESTAMP = 130,
    CT_REGEX = 140,
    CT_DBREF = 150,
    CT_CODE = 160,
    CT_CODEWSCOPE = 170,
    CT_MAXKEY = 240,
    CT_END = 4,
};

typedef struct buf {
    uint8_t *p;
    size_t len, cap;
} buf_t;

static void
put(buf_t *b, const void *data, size_t n)
{
    if (b->len + n > b->cap) {
        b->cap = (b->len + n) * 2 + 64;
        b->p = bson_realloc(b->p, b->cap);
    }
    memcpy(b->p + b->len, data, n);
    b->len += n;
}

static void
put1(buf_t *b, uint8_t c)
{
    put(b, &c, 1);
}

static void
put_be64(buf_t *b, uint64_t v)
{
    uint8_t x[8];
    for (int i = 7; i >= 0; i--) {
        x[i] = (uint8_t)(v & 0xff);
        v >>= 8;
    }
    put(b, x, 8);
}

static void
put_cstring(buf_t *b, const char *s, size_t n, bool escape)
{
    for (size_t i = 0; i < n; i++) {
        put1(b, (uint8_t)s[i]);
        if (escape && s[i] == 0) {
            put1(b, 0xff);
        }
    }
    put1(b, 0);
}

static void
put_int(buf_t *b, int64_t v)
{
    uint64_t mag, shifted;
    int n = 0;
    uint8_t bytes[8];

    if (v == 0) {
        put1(b, CT_ZERO);
        return;
    }
    mag = v < 0 ? (uint64_t)(-(v + 1)) + 1 : (uint64_t)v;
    shifted = mag << 1;
    while (n < 8 && (shifted >> (8 * n)) != 0) {
        n++;
    }
    for (int i = 0; i < n; i++) {
        uint8_t byte = (uint8_t)((shifted >> (8 * (n - 1 - i))) & 0xff);
        bytes[i] = v < 0 ? (uint8_t)~byte : byte;
    }
    put1(b, (uint8_t)(v < 0 ? CT_NEG_1BYTE - (n - 1) : CT_POS_1BYTE + (n - 1)));
    put(b, bytes, (size_t)n);
}

static void
put_double(buf_t *b, double d)
{
    uint64_t bits;

    if (isnan(d)) {
        put1(b, CT_NAN);
    } else if (d == floor(d) && fabs(d) < 9007199254740992.0) {
        put_int(b, (int64_t)d);
    } else {
        /* Not MongoDB's fractional encoding: the magnitude class and the IEEE bits, which
         * keep equal values equal and order within a class. */
        memcpy(&bits, &d, sizeof(bits));
        bits &= ~(1ULL << 63);
        if (d < 0) {
            put1(b, fabs(d) < 1.0 ? CT_NEG_SMALL : CT_NEG_LARGE);
            put_be64(b, ~bits);
        } else {
            put1(b, fabs(d) < 1.0 ? CT_POS_SMALL : CT_POS_LARGE);
            put_be64(b, bits);
        }
    }
}

static void put_value(buf_t *b, const bson_iter_t *it, int depth);

static void
put_doc_body(buf_t *b, const bson_iter_t *parent, bool array, int depth)
{
    bson_iter_t sub;
    if (bson_iter_recurse(parent, &sub)) {
        while (shl_iter_next(&sub)) {
            if (!array) {
                size_t mark = b->len;
                const char *k = shl_iter_key(&sub);
                /* The value's type byte first: written by put_value, copied before the name. */
                put_value(b, &sub, depth + 1);
                {
                    uint8_t ct = b->p[mark];
                    size_t vlen = b->len - mark;
                    uint8_t *val = bson_malloc(vlen);
                    memcpy(val, b->p + mark, vlen);
                    b->len = mark;
                    put1(b, ct);
                    put_cstring(b, k, strlen(k), false);
                    put(b, val, vlen);
                    bson_free(val);
                }
            } else {
                put_value(b, &sub, depth + 1);
            }
        }
    }
    put1(b, 0);
}

static void
put_value(buf_t *b, const bson_iter_t *it, int depth)
{
    uint32_t len = 0, t, i;
    const uint8_t *bin = NULL;
    bson_subtype_t sub;
    const char *s;
    const char *opts;

    switch (shl_iter_type(it)) {
    case BSON_TYPE_MINKEY:
        put1(b, CT_MINKEY);
        break;
    case BSON_TYPE_MAXKEY:
        put1(b, CT_MAXKEY);
        break;
    case BSON_TYPE_UNDEFINED:
        put1(b, CT_UNDEFINED);
        break;
    case BSON_TYPE_NULL:
        put1(b, CT_NULL);
        break;
    case BSON_TYPE_INT32:
        put_int(b, bson_iter_int32(it));
        break;
    case BSON_TYPE_INT64:
        put_int(b, bson_iter_int64(it));
        break;
    case BSON_TYPE_DOUBLE:
        put_double(b, bson_iter_double(it));
        break;
    case BSON_TYPE_DECIMAL128: {
        bson_decimal128_t dec;
        char str[BSON_DECIMAL128_STRING];
        bson_iter_decimal128(it, &dec);
        bson_decimal128_to_string(&dec, str);
        put_double(b, strtod(str, NULL));
        break;
    }
    case BSON_TYPE_UTF8:
    case BSON_TYPE_SYMBOL:
        s = shl_iter_type(it) == BSON_TYPE_UTF8 ? bson_iter_utf8(it, &len)
                                                : bson_iter_symbol(it, &len);
        put1(b, CT_STRING);
        put_cstring(b, s, len, true);
        break;
    case BSON_TYPE_CODE:
        s = bson_iter_code(it, &len);
        put1(b, CT_CODE);
        put_cstring(b, s, len, true);
        break;
    case BSON_TYPE_DOCUMENT:
    case BSON_TYPE_ARRAY: {
        bool array = shl_iter_type(it) == BSON_TYPE_ARRAY;
        put1(b, array ? CT_ARRAY : CT_OBJECT);
        if (depth < 200) {
            put_doc_body(b, it, array, depth);
        } else {
            put1(b, 0);
        }
        break;
    }
    case BSON_TYPE_BINARY:
        bson_iter_binary(it, &sub, &len, &bin);
        put1(b, CT_BINDATA);
        if (len < 0xff) {
            put1(b, (uint8_t)len);
        } else {
            uint8_t l[4] = {(uint8_t)(len >> 24), (uint8_t)(len >> 16), (uint8_t)(len >> 8),
                            (uint8_t)len};
            put1(b, 0xff);
            put(b, l, 4);
        }
        put1(b, (uint8_t)sub);
        put(b, bin, len);
        break;
    case BSON_TYPE_OID:
        put1(b, CT_OID);
        put(b, bson_iter_oid(it)->bytes, 12);
        break;
    case BSON_TYPE_BOOL:
        put1(b, bson_iter_bool(it) ? CT_TRUE : CT_FALSE);
        break;
    case BSON_TYPE_DATE_TIME:
        put1(b, CT_DATE);
        put_be64(b, (uint64_t)bson_iter_date_time(it) ^ (1ULL << 63));
        break;
    case BSON_TYPE_TIMESTAMP:
        bson_iter_timestamp(it, &t, &i);
        put1(b, CT_TIMESTAMP);
        put_be64(b, ((uint64_t)t << 32) | i);
        break;
    case BSON_TYPE_REGEX:
        s = bson_iter_regex(it, &opts);
        put1(b, CT_REGEX);
        put_cstring(b, s, strlen(s), false);
        put_cstring(b, opts, strlen(opts), false);
        break;
    case BSON_TYPE_DBPOINTER: {
        const bson_oid_t *oid;
        bson_iter_dbpointer(it, &len, &s, &oid);
        put1(b, CT_DBREF);
        put(b, s, len);
        put(b, oid->bytes, 12);
        break;
    }
    case BSON_TYPE_CODEWSCOPE: {
        const uint8_t *scope;
        uint32_t slen;
        s = bson_iter_codewscope(it, &len, &slen, &scope);
        put1(b, CT_CODEWSCOPE);
        put_cstring(b, s, len, true);
        put1(b, 0);
        break;
    }
    default:
        put1(b, CT_NULL);
        break;
    }
}

static void
encode(const shl_resume_token_t *t, buf_t *b)
{
    put1(b, CT_TIMESTAMP);
    put_be64(b, t->cluster_time);
    put_int(b, t->version);
    if (t->version >= 1) {
        put_int(b, t->token_type);
    }
    put_int(b, t->txn_op_index);
    put1(b, t->from_invalidate ? CT_TRUE : CT_FALSE);
    if (t->has_uuid) {
        put1(b, CT_BINDATA);
        put1(b, 16);
        put1(b, BSON_SUBTYPE_UUID);
        put(b, t->uuid, 16);
    }
    if (t->event_id != NULL) {
        bson_iter_t it;
        bson_t wrap = BSON_INITIALIZER;
        BSON_APPEND_DOCUMENT(&wrap, "e", t->event_id);
        if (bson_iter_init_find(&it, &wrap, "e")) {
            put_value(b, &it, 0);
        }
        bson_destroy(&wrap);
    }
    put1(b, CT_END);
}

char *
shl_resume_token_hex(const shl_resume_token_t *t)
{
    static const char digits[] = "0123456789ABCDEF";
    buf_t b = {NULL, 0, 0};
    char *hex;

    encode(t, &b);
    hex = bson_malloc(b.len * 2 + 1);
    for (size_t i = 0; i < b.len; i++) {
        hex[2 * i] = digits[b.p[i] >> 4];
        hex[2 * i + 1] = digits[b.p[i] & 0xf];
    }
    hex[b.len * 2] = '\0';
    bson_free(b.p);
    return hex;
}

char *
shl_resume_token_fragment_hex(const char *event_hex, int64_t fragment)
{
    static const char digits[] = "0123456789ABCDEF";
    size_t n = strlen(event_hex);
    buf_t b = {NULL, 0, 0};
    char *hex;

    SHL_INVARIANT(n >= 2 && strcmp(event_hex + n - 2, "04") == 0);
    put_int(&b, fragment);
    hex = bson_malloc(n + b.len * 2 + 1);
    memcpy(hex, event_hex, n - 2);
    for (size_t i = 0; i < b.len; i++) {
        hex[n - 2 + 2 * i] = digits[b.p[i] >> 4];
        hex[n - 2 + 2 * i + 1] = digits[b.p[i] & 0xf];
    }
    memcpy(hex + n - 2 + b.len * 2, "04", 3);
    bson_free(b.p);
    return hex;
}

void
shl_resume_token_append(bson_t *out, const char *key, const shl_resume_token_t *t)
{
    bson_t d;
    char *hex = shl_resume_token_hex(t);
    bson_append_document_begin(out, key, -1, &d);
    BSON_APPEND_UTF8(&d, "_data", hex);
    bson_append_document_end(out, &d);
    bson_free(hex);
}

const char *
shl_resume_token_doc_hex(const bson_t *doc)
{
    bson_iter_t it;
    if (!bson_iter_init_find(&it, doc, "_data") || !BSON_ITER_HOLDS_UTF8(&it)) {
        return NULL;
    }
    return bson_iter_utf8(&it, NULL);
}

/* ---------------------------------------------------------------- decoding */

typedef struct reader {
    const char *hex;
    size_t pos, len; /* in bytes */
} reader_t;

static int
hexval(char c)
{
    if (c >= '0' && c <= '9') {
        return c - '0';
    }
    if (c >= 'A' && c <= 'F') {
        return c - 'A' + 10;
    }
    if (c >= 'a' && c <= 'f') {
        return c - 'a' + 10;
    }
    return -1;
}

static bool
get1(reader_t *r, uint8_t *out)
{
    int hi, lo;
    if (r->pos >= r->len) {
        return false;
    }
    hi = hexval(r->hex[2 * r->pos]);
    lo = hexval(r->hex[2 * r->pos + 1]);
    if (hi < 0 || lo < 0) {
        return false;
    }
    *out = (uint8_t)(hi << 4 | lo);
    r->pos++;
    return true;
}

static bool
get_int(reader_t *r, int64_t *v)
{
    uint8_t ct, byte;
    uint64_t acc = 0;
    int n;

    if (!get1(r, &ct)) {
        return false;
    }
    if (ct == CT_ZERO) {
        *v = 0;
        return true;
    }
    if (ct < CT_POS_1BYTE || ct > CT_POS_1BYTE + 7) {
        return false; /* negative or non-integral: never in the fields read here */
    }
    n = ct - CT_POS_1BYTE + 1;
    for (int i = 0; i < n; i++) {
        if (!get1(r, &byte)) {
            return false;
        }
        acc = acc << 8 | byte;
    }
    if (acc & 1) {
        return false;
    }
    *v = (int64_t)(acc >> 1);
    return true;
}

bool
shl_resume_token_parse(const bson_t *doc, shl_resume_token_t *out, const char **hex_out,
                       char *why)
{
    const char *hex = shl_resume_token_doc_hex(doc);
    reader_t r;
    uint8_t ct, byte;
    int64_t v;
    bool ok = false;

    memset(out, 0, sizeof(*out));
    if (hex_out != NULL) {
        *hex_out = hex;
    }
    if (hex == NULL) {
        snprintf(why, 128, "missing or invalid _data field");
        goto done;
    }
    r.hex = hex;
    r.pos = 0;
    r.len = strlen(hex) / 2;
    if (strlen(hex) % 2 != 0 || !get1(&r, &ct) || ct != CT_TIMESTAMP) {
        snprintf(why, 128, "resume token has no clusterTime");
        goto done;
    }
    for (int i = 0; i < 8; i++) {
        if (!get1(&r, &byte)) {
            snprintf(why, 128, "resume token is truncated");
            goto done;
        }
        out->cluster_time = out->cluster_time << 8 | byte;
    }
    if (!get_int(&r, &v) || v < 0 || v > 2) {
        snprintf(why, 128, "Invalid resume token: unsupported version");
        goto done;
    }
    out->version = (int32_t)v;
    out->token_type = SHL_RESUME_TOKEN_EVENT;
    if (out->version >= 1) {
        if (!get_int(&r, &v) || (v != SHL_RESUME_TOKEN_HWM && v != SHL_RESUME_TOKEN_EVENT)) {
            snprintf(why, 128, "Invalid resume token: bad tokenType");
            goto done;
        }
        out->token_type = (int32_t)v;
    }
    if (!get_int(&r, &out->txn_op_index) || !get1(&r, &ct) || (ct != CT_TRUE && ct != CT_FALSE)) {
        snprintf(why, 128, "Invalid resume token: bad txnOpIndex or fromInvalidate");
        goto done;
    }
    out->from_invalidate = ct == CT_TRUE;
    if (r.pos < r.len && get1(&r, &ct) && ct == CT_BINDATA) {
        uint8_t l = 0, sub = 0;
        if (!get1(&r, &l) || l != 16 || !get1(&r, &sub)) {
            snprintf(why, 128, "Invalid resume token: bad uuid");
            goto done;
        }
        for (int i = 0; i < 16; i++) {
            if (!get1(&r, &out->uuid[i])) {
                snprintf(why, 128, "Invalid resume token: bad uuid");
                goto done;
            }
        }
        out->has_uuid = true;
    }
    ok = true;
done:
    return ok;
}
