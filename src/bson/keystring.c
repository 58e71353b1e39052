/*
 * keystring.c -- the KeyString byte format (keystring.h). Every value encodes as a type
 * byte (one per canonical type, in canonical order) and a body; every encoding is
 * prefix-free, so concatenated fields compare field by field and inverting a field's bytes
 * (descending) exactly reverses its order.
 *
 * Bodies:
 *   numbers     class byte (NaN < -Inf < negative < zero < positive < +Inf); for nonzero
 *               finite values the exact shl_num_t: exponent (2 bytes, biased) then digit
 *               pairs, byte = 11 * (a + 1) + (b + 1), or 11 * (a + 1) for a final lone
 *               digit, 0x00 after an even count. Negative magnitudes are inverted.
 *   strings     bytes with 0x00 escaped as 00 01, terminated by 00 00 (String, Symbol,
 *               Code, field names, regex pattern and flags).
 *   objects     per element: type byte, field name (string), body; then 0x00.
 *   arrays      per element: type byte, body; then 0x00.
 *   BinData     length (1 byte if < 255, else FF + 4 bytes), subtype, bytes.
 *   ObjectId    12 bytes. Bool: 00/01. Date: int64 with the sign bit flipped, big-endian.
 *   Timestamp   t then i, big-endian. DBPointer: namespace length (4), namespace, ObjectId.
 *   CodeWScope  code (string), then the scope as an object body.
 * A RecordId is 8 bytes, big-endian with the sign bit flipped, never inverted.
 */
#include "bson/bson_iter.h"
#include "bson/keystring.h"

#include <string.h>

#include "bson/bson_compare.h"
#include "bson/bson_private.h"

/* Type bytes, in canonical order; all within [0x0A, 0xF0], so 0x00 (end of object) sorts
 * first and 0xFF (max suffix) last, also once inverted. */
enum {
    KS_MINKEY = 0x0A,
    KS_UNDEFINED = 0x0F,
    KS_NULL = 0x14,
    KS_NUMBER = 0x1E,
    KS_STRING = 0x28,
    KS_OBJECT = 0x32,
    KS_ARRAY = 0x3C,
    KS_BINDATA = 0x46,
    KS_OID = 0x50,
    KS_BOOL = 0x5A,
    KS_DATE = 0x64,
    KS_TIMESTAMP = 0x6E,
    KS_REGEX = 0x78,
    KS_DBPOINTER = 0x82,
    KS_CODE = 0x8C,
    KS_CODEWSCOPE = 0x96,
    KS_MAXKEY = 0xF0,
};

#define KS_END 0x00
#define KS_EXP_BIAS 0x8000
#define KS_MAX_DEPTH 200

static uint8_t
type_byte(bson_type_t t)
{
    switch (t) {
    case BSON_TYPE_MINKEY:
        return KS_MINKEY;
    case BSON_TYPE_NULL:
        return KS_NULL;
    case BSON_TYPE_DOUBLE:
    case BSON_TYPE_INT32:
    case BSON_TYPE_INT64:
    case BSON_TYPE_DECIMAL128:
        return KS_NUMBER;
    case BSON_TYPE_UTF8:
    case BSON_TYPE_SYMBOL:
        return KS_STRING;
    case BSON_TYPE_DOCUMENT:
        return KS_OBJECT;
    case BSON_TYPE_ARRAY:
        return KS_ARRAY;
    case BSON_TYPE_BINARY:
        return KS_BINDATA;
    case BSON_TYPE_OID:
        return KS_OID;
    case BSON_TYPE_BOOL:
        return KS_BOOL;
    case BSON_TYPE_DATE_TIME:
        return KS_DATE;
    case BSON_TYPE_TIMESTAMP:
        return KS_TIMESTAMP;
    case BSON_TYPE_REGEX:
        return KS_REGEX;
    case BSON_TYPE_DBPOINTER:
        return KS_DBPOINTER;
    case BSON_TYPE_CODE:
        return KS_CODE;
    case BSON_TYPE_CODEWSCOPE:
        return KS_CODEWSCOPE;
    case BSON_TYPE_MAXKEY:
        return KS_MAXKEY;
    default:
        /* Undefined and EOO share canonical type 0. */
        return KS_UNDEFINED;
    }
}

void
shl_keystring_init(shl_keystring_t *ks)
{
    ks->data = NULL;
    ks->len = 0;
    ks->cap = 0;
}

void
shl_keystring_cleanup(shl_keystring_t *ks)
{
    bson_free(ks->data);
    shl_keystring_init(ks);
}

void
shl_keystring_reset(shl_keystring_t *ks)
{
    ks->len = 0;
}

static uint8_t *
reserve(shl_keystring_t *ks, size_t n)
{
    if (ks->len + n > ks->cap) {
        size_t cap = ks->cap ? ks->cap : 64;
        while (cap < ks->len + n) {
            cap *= 2;
        }
        ks->data = bson_realloc(ks->data, cap); /* aborts on out-of-memory */
        ks->cap = cap;
    }
    return ks->data + ks->len;
}

/* ---- encoding ---- */

typedef struct writer {
    shl_keystring_t *ks;
    uint8_t mask; /* 0xFF while writing a descending field (or a negative magnitude) */
} writer_t;

static void
put(writer_t *w, uint8_t b)
{
    *reserve(w->ks, 1) = b ^ w->mask;
    w->ks->len++;
}

static void
put_raw(writer_t *w, const uint8_t *p, size_t n)
{
    uint8_t *dst = reserve(w->ks, n);
    for (size_t i = 0; i < n; i++) {
        dst[i] = p[i] ^ w->mask;
    }
    w->ks->len += n;
}

static void
put_be(writer_t *w, uint64_t v, int nbytes)
{
    for (int i = nbytes - 1; i >= 0; i--) {
        put(w, (uint8_t)(v >> (8 * i)));
    }
}

static void
put_string(writer_t *w, const char *s, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        uint8_t c = (uint8_t)s[i];
        put(w, c);
        if (c == 0) {
            put(w, 0x01);
        }
    }
    put(w, 0x00);
    put(w, 0x00);
}

static void
put_number(writer_t *w, const bson_value_t *v)
{
    shl_num_t n;
    shl_num_from_value(v, &n);
    put(w, (uint8_t)(n.cls + 1));
    if (n.cls != SHL_NUM_POS && n.cls != SHL_NUM_NEG) {
        return;
    }
    uint8_t saved = w->mask;
    if (n.cls == SHL_NUM_NEG) {
        w->mask ^= 0xFF; /* larger magnitude, smaller number */
    }
    put_be(w, (uint64_t)(n.exp + KS_EXP_BIAS), 2);
    for (int i = 0; i < n.ndigits; i += 2) {
        int b = i + 1 < n.ndigits ? n.d[i + 1] + 1 : 0;
        put(w, (uint8_t)(11 * (n.d[i] + 1) + b));
    }
    if (n.ndigits % 2 == 0) {
        put(w, 0x00);
    }
    w->mask = saved;
}

static void put_body(writer_t *w, const bson_value_t *v, int depth);

static void
put_doc(writer_t *w, const uint8_t *data, uint32_t len, bool is_array, int depth)
{
    bson_iter_t it;
    if (depth < KS_MAX_DEPTH && bson_iter_init_from_data(&it, data, len)) {
        while (shl_iter_next(&it)) {
            put(w, type_byte(shl_iter_type(&it)));
            if (!is_array) {
                put_string(w, shl_iter_key(&it), shl_iter_key_len(&it));
            }
            put_body(w, bson_iter_value(&it), depth + 1);
        }
    }
    put(w, KS_END);
}

static void
put_body(writer_t *w, const bson_value_t *v, int depth)
{
    switch (v->value_type) {
    case BSON_TYPE_DOUBLE:
    case BSON_TYPE_INT32:
    case BSON_TYPE_INT64:
    case BSON_TYPE_DECIMAL128:
        put_number(w, v);
        break;
    case BSON_TYPE_UTF8:
        put_string(w, v->value.v_utf8.str, v->value.v_utf8.len);
        break;
    case BSON_TYPE_SYMBOL:
        put_string(w, v->value.v_symbol.symbol, v->value.v_symbol.len);
        break;
    case BSON_TYPE_DOCUMENT:
    case BSON_TYPE_ARRAY:
        put_doc(w, v->value.v_doc.data, v->value.v_doc.data_len, v->value_type == BSON_TYPE_ARRAY,
                depth);
        break;
    case BSON_TYPE_BINARY: {
        uint32_t len = v->value.v_binary.data_len;
        if (len < 0xFF) {
            put(w, (uint8_t)len);
        } else {
            put(w, 0xFF);
            put_be(w, len, 4);
        }
        put(w, (uint8_t)v->value.v_binary.subtype);
        put_raw(w, v->value.v_binary.data, len);
        break;
    }
    case BSON_TYPE_OID:
        put_raw(w, v->value.v_oid.bytes, 12);
        break;
    case BSON_TYPE_BOOL:
        put(w, v->value.v_bool ? 1 : 0);
        break;
    case BSON_TYPE_DATE_TIME:
        put_be(w, (uint64_t)v->value.v_datetime ^ (UINT64_C(1) << 63), 8);
        break;
    case BSON_TYPE_TIMESTAMP:
        put_be(w, v->value.v_timestamp.timestamp, 4);
        put_be(w, v->value.v_timestamp.increment, 4);
        break;
    case BSON_TYPE_REGEX:
        put_string(w, v->value.v_regex.regex, strlen(v->value.v_regex.regex));
        put_string(w, v->value.v_regex.options, strlen(v->value.v_regex.options));
        break;
    case BSON_TYPE_DBPOINTER:
        put_be(w, v->value.v_dbpointer.collection_len, 4);
        put_raw(w, (const uint8_t *)v->value.v_dbpointer.collection,
                v->value.v_dbpointer.collection_len);
        put_raw(w, v->value.v_dbpointer.oid.bytes, 12);
        break;
    case BSON_TYPE_CODE:
        put_string(w, v->value.v_code.code, v->value.v_code.code_len);
        break;
    case BSON_TYPE_CODEWSCOPE:
        put_string(w, v->value.v_codewscope.code, v->value.v_codewscope.code_len);
        put_doc(w, v->value.v_codewscope.scope_data, v->value.v_codewscope.scope_len, false, depth);
        break;
    default:
        /* MinKey, MaxKey, Null, Undefined: the type byte says it all. */
        break;
    }
}

void
shl_keystring_append_value(shl_keystring_t *ks, const bson_value_t *v, bool descending)
{
    writer_t w = {ks, descending ? 0xFF : 0x00};
    put(&w, type_byte(v->value_type));
    put_body(&w, v, 0);
}

void
shl_keystring_append_iter(shl_keystring_t *ks, const bson_iter_t *it, bool descending)
{
    bson_iter_t copy = *it;
    shl_keystring_append_value(ks, bson_iter_value(&copy), descending);
}

size_t
shl_keystring_append_doc_values(shl_keystring_t *ks, const bson_t *values, const bool *descending)
{
    bson_iter_t it;
    size_t n = 0;
    if (bson_iter_init(&it, values)) {
        while (shl_iter_next(&it)) {
            shl_keystring_append_value(ks, bson_iter_value(&it), descending && descending[n]);
            n++;
        }
    }
    return n;
}

void
shl_keystring_append_record_id(shl_keystring_t *ks, int64_t rid)
{
    writer_t w = {ks, 0x00};
    put_be(&w, (uint64_t)rid ^ (UINT64_C(1) << 63), 8);
}

void
shl_keystring_append_max_suffix(shl_keystring_t *ks)
{
    /* Above any type byte (<= 0xF5 even inverted) and any 8-byte RecordId. */
    writer_t w = {ks, 0x00};
    for (int i = 0; i < SHL_KEYSTRING_RECORD_ID_SIZE + 1; i++) {
        put(&w, 0xFF);
    }
}

int
shl_keystring_compare(const uint8_t *a, size_t alen, const uint8_t *b, size_t blen)
{
    size_t n = alen < blen ? alen : blen;
    int c = n ? memcmp(a, b, n) : 0;
    if (c != 0) {
        return c < 0 ? -1 : 1;
    }
    return alen == blen ? 0 : alen < blen ? -1 : 1;
}

char *
shl_keystring_to_hex(const uint8_t *key, size_t len)
{
    static const char hex[] = "0123456789ABCDEF";
    char *s = bson_malloc(2 * len + 1);
    for (size_t i = 0; i < len; i++) {
        s[2 * i] = hex[key[i] >> 4];
        s[2 * i + 1] = hex[key[i] & 15];
    }
    s[2 * len] = '\0';
    return s;
}

/* ---- decoding ---- */

typedef struct reader {
    const uint8_t *p;
    size_t len;
    size_t pos;
    uint8_t mask;
} reader_t;

static bool
get(reader_t *r, uint8_t *b)
{
    if (r->pos >= r->len) {
        return false;
    }
    *b = r->p[r->pos++] ^ r->mask;
    return true;
}

static bool
get_be(reader_t *r, int nbytes, uint64_t *v)
{
    uint64_t x = 0;
    for (int i = 0; i < nbytes; i++) {
        uint8_t b;
        if (!get(r, &b)) {
            return false;
        }
        x = (x << 8) | b;
    }
    *v = x;
    return true;
}

static bool
get_raw(reader_t *r, uint8_t *dst, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (!get(r, &dst[i])) {
            return false;
        }
    }
    return true;
}

/* A decoded string, NUL-terminated for the libbson calls that want C strings. */
typedef struct str_buf {
    char *s;
    size_t len;
    size_t cap;
} str_buf_t;

static void
str_push(str_buf_t *sb, char c)
{
    if (sb->len + 2 > sb->cap) {
        sb->cap = sb->cap ? 2 * sb->cap : 32;
        sb->s = bson_realloc(sb->s, sb->cap);
    }
    sb->s[sb->len++] = c;
    sb->s[sb->len] = '\0';
}

static bool
get_string(reader_t *r, str_buf_t *sb)
{
    if (sb->cap == 0) {
        sb->cap = 32;
        sb->s = bson_malloc(sb->cap);
    }
    sb->len = 0;
    sb->s[0] = '\0';
    for (;;) {
        uint8_t c, next;
        if (!get(r, &c)) {
            return false;
        }
        if (c != 0) {
            str_push(sb, (char)c);
            continue;
        }
        if (!get(r, &next)) {
            return false;
        }
        if (next == 0x00) {
            return true;
        }
        if (next != 0x01) {
            return false;
        }
        str_push(sb, '\0');
    }
}

static bool
get_number(reader_t *r, bson_value_t *out)
{
    shl_num_t n;
    uint8_t cls;
    bool ok = true;

    memset(&n, 0, sizeof(n));
    if (!get(r, &cls) || cls < 1 || cls > SHL_NUM_POS_INF + 1) {
        return false;
    }
    n.cls = (uint8_t)(cls - 1);
    if (n.cls == SHL_NUM_POS || n.cls == SHL_NUM_NEG) {
        uint8_t saved = r->mask;
        uint64_t exp;
        if (n.cls == SHL_NUM_NEG) {
            r->mask ^= 0xFF;
        }
        ok = get_be(r, 2, &exp);
        n.exp = (int16_t)((int)exp - KS_EXP_BIAS);
        while (ok) {
            uint8_t b;
            if (!(ok = get(r, &b)) || b == 0x00) {
                break;
            }
            int a = b / 11 - 1, lo = b % 11;
            if (a < 0 || a > 9 || n.ndigits + 2 > SHL_NUM_MAX_DIGITS + 1) {
                ok = false;
                break;
            }
            n.d[n.ndigits++] = (uint8_t)a;
            if (lo == 0) {
                break; /* a final lone digit */
            }
            if (n.ndigits >= SHL_NUM_MAX_DIGITS) {
                ok = false;
                break;
            }
            n.d[n.ndigits++] = (uint8_t)(lo - 1);
        }
        r->mask = saved;
    }
    return ok && shl_num_to_value(&n, out);
}

static bool get_body(reader_t *r, uint8_t type, bson_t *parent, const char *key, int depth,
                     str_buf_t *sb);

static bool
get_doc(reader_t *r, bson_t *doc, bool is_array, int depth, str_buf_t *sb)
{
    uint32_t i = 0;
    char *name = NULL;
    bool ok = true;

    if (depth >= KS_MAX_DEPTH) {
        return false;
    }
    for (;;) {
        uint8_t type;
        char idx[16];
        const char *key;
        if (!get(r, &type)) {
            ok = false;
            break;
        }
        if (type == KS_END) {
            break;
        }
        if (is_array) {
            bson_uint32_to_string(i++, &key, idx, sizeof(idx));
        } else {
            if (!get_string(r, sb) || strlen(sb->s) != sb->len) {
                ok = false; /* field names cannot hold NUL */
                break;
            }
            bson_free(name);
            name = bson_strdup(sb->s);
            key = name;
        }
        if (!get_body(r, type, doc, key, depth + 1, sb)) {
            ok = false;
            break;
        }
    }
    bson_free(name);
    return ok;
}

/*
 * Appends element 'key' of 'type' whose value bytes are the 'n1' bytes of 'p1' then the
 * 'n2' of 'p2', exactly: bson_append_regex sorts the flags and drops unknown ones, and
 * bson_append_code(_with_scope) and bson_append_dbpointer stop at an embedded NUL, but
 * the values compared (and encoded) are the raw bytes.
 */
static void
put_le32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

static bool
append_raw(bson_t *parent, const char *key, uint8_t type, const void *p1, size_t n1, const void *p2,
           size_t n2)
{
    size_t klen = strlen(key), n = 4 + 1 + klen + 1 + n1 + n2 + 1;
    uint8_t *buf;
    bson_t elem;
    bool ok = false;

    if (n > INT32_MAX) {
        return false;
    }
    buf = bson_malloc(n);
    put_le32(buf, (uint32_t)n);
    buf[4] = type;
    memcpy(buf + 5, key, klen + 1);
    if (n1 > 0) {
        memcpy(buf + 5 + klen + 1, p1, n1);
    }
    if (n2 > 0) {
        memcpy(buf + 5 + klen + 1 + n1, p2, n2);
    }
    buf[n - 1] = 0;
    if (bson_init_static(&elem, buf, n)) {
        ok = bson_concat(parent, &elem);
    }
    bson_free(buf);
    return ok;
}

/* A Code value of 'len' bytes (NULs allowed): int32 length + 1, the bytes, NUL. */
static bool
append_code_raw(bson_t *parent, const char *key, const char *code, size_t len)
{
    uint8_t *v;
    bool ok;
    if (len > INT32_MAX - 16) {
        return false;
    }
    v = bson_malloc(4 + len + 1);
    put_le32(v, (uint32_t)(len + 1));
    memcpy(v + 4, code, len);
    v[4 + len] = 0;
    ok = append_raw(parent, key, BSON_TYPE_CODE, v, 4 + len + 1, NULL, 0);
    bson_free(v);
    return ok;
}

/* Code with scope: int32 total, int32 code length + 1, code, NUL, the scope document. */
static bool
append_codewscope_raw(bson_t *parent, const char *key, const char *code, size_t len,
                      const bson_t *scope)
{
    uint8_t *v;
    size_t n = 4 + 4 + len + 1;
    bool ok;
    if (len > INT32_MAX / 2 || scope->len > INT32_MAX / 2) {
        return false;
    }
    v = bson_malloc(n);
    put_le32(v, (uint32_t)(n + scope->len));
    put_le32(v + 4, (uint32_t)(len + 1));
    memcpy(v + 8, code, len);
    v[8 + len] = 0;
    ok = append_raw(parent, key, BSON_TYPE_CODEWSCOPE, v, n, bson_get_data(scope), scope->len);
    bson_free(v);
    return ok;
}

static bool
get_body(reader_t *r, uint8_t type, bson_t *parent, const char *key, int depth, str_buf_t *sb)
{
    uint64_t x, y;
    uint8_t b;

    switch (type) {
    case KS_MINKEY:
        return bson_append_minkey(parent, key, -1);
    case KS_MAXKEY:
        return bson_append_maxkey(parent, key, -1);
    case KS_UNDEFINED:
        return bson_append_undefined(parent, key, -1);
    case KS_NULL:
        return bson_append_null(parent, key, -1);
    case KS_NUMBER: {
        bson_value_t v;
        return get_number(r, &v) && bson_append_value(parent, key, -1, &v);
    }
    case KS_STRING:
        return get_string(r, sb) && bson_append_utf8(parent, key, -1, sb->s, (int)sb->len);
    case KS_CODE:
        return get_string(r, sb) && append_code_raw(parent, key, sb->s, sb->len);
    case KS_OBJECT:
    case KS_ARRAY: {
        bson_t child;
        bool ok;
        if (type == KS_OBJECT) {
            bson_append_document_begin(parent, key, -1, &child);
        } else {
            bson_append_array_begin(parent, key, -1, &child);
        }
        ok = get_doc(r, &child, type == KS_ARRAY, depth, sb);
        if (type == KS_OBJECT) {
            bson_append_document_end(parent, &child);
        } else {
            bson_append_array_end(parent, &child);
        }
        return ok;
    }
    case KS_BINDATA: {
        uint8_t *data;
        bool ok;
        if (!get(r, &b)) {
            return false;
        }
        x = b;
        if (b == 0xFF && !get_be(r, 4, &x)) {
            return false;
        }
        if (!get(r, &b) || x > r->len - r->pos) {
            return false;
        }
        data = bson_malloc(x + 1);
        ok = get_raw(r, data, x) &&
             bson_append_binary(parent, key, -1, (bson_subtype_t)b, data, (uint32_t)x);
        bson_free(data);
        return ok;
    }
    case KS_OID: {
        bson_oid_t oid;
        return get_raw(r, oid.bytes, 12) && bson_append_oid(parent, key, -1, &oid);
    }
    case KS_BOOL:
        return get(r, &b) && b <= 1 && bson_append_bool(parent, key, -1, b == 1);
    case KS_DATE:
        return get_be(r, 8, &x) &&
               bson_append_date_time(parent, key, -1, (int64_t)(x ^ (UINT64_C(1) << 63)));
    case KS_TIMESTAMP:
        return get_be(r, 4, &x) && get_be(r, 4, &y) &&
               bson_append_timestamp(parent, key, -1, (uint32_t)x, (uint32_t)y);
    case KS_REGEX: {
        char *pattern;
        bool ok;
        if (!get_string(r, sb) || strlen(sb->s) != sb->len) {
            return false;
        }
        pattern = bson_strdup(sb->s);
        ok = get_string(r, sb) && strlen(sb->s) == sb->len &&
             append_raw(parent, key, BSON_TYPE_REGEX, pattern, strlen(pattern) + 1, sb->s,
                        sb->len + 1);
        bson_free(pattern);
        return ok;
    }
    case KS_DBPOINTER: {
        /* The namespace is a BSON string: it may hold NULs, which bson_append_dbpointer
         * (a C string) would drop, so the value is built as bytes: int32 length + 1, the
         * namespace, NUL, the ObjectId. Found by fuzz_keystring. */
        uint8_t *v;
        bool ok;
        if (!get_be(r, 4, &x) || x > r->len - r->pos) {
            return false;
        }
        v = bson_malloc(4 + x + 1 + 12);
        put_le32(v, (uint32_t)(x + 1));
        v[4 + x] = 0;
        ok = get_raw(r, v + 4, x) && get_raw(r, v + 4 + x + 1, 12) &&
             append_raw(parent, key, BSON_TYPE_DBPOINTER, v, 4 + x + 1 + 12, NULL, 0);
        bson_free(v);
        return ok;
    }
    case KS_CODEWSCOPE: {
        bson_t scope = BSON_INITIALIZER;
        char *code;
        size_t len;
        bool ok;
        if (!get_string(r, sb)) {
            bson_destroy(&scope);
            return false;
        }
        len = sb->len;
        code = bson_malloc(len + 1);
        memcpy(code, sb->s, len + 1);
        ok = get_doc(r, &scope, false, depth, sb) &&
             append_codewscope_raw(parent, key, code, len, &scope);
        bson_free(code);
        bson_destroy(&scope);
        return ok;
    }
    default:
        return false;
    }
}

bool
shl_keystring_decode(const uint8_t *key, size_t len, const bool *descending, size_t nfields,
                     bson_t *out, int64_t *rid_or_null)
{
    reader_t r = {key, len, 0, 0};
    str_buf_t sb = {NULL, 0, 0};
    bool ok = true;

    bson_init(out);
    if (rid_or_null != NULL) {
        ok = shl_keystring_split_record_id(key, len, &r.len, rid_or_null);
    }
    for (size_t i = 0; ok && i < nfields; i++) {
        char idx[16];
        const char *k;
        uint8_t type;
        bson_uint32_to_string((uint32_t)i, &k, idx, sizeof(idx));
        r.mask = descending && descending[i] ? 0xFF : 0x00;
        ok = get(&r, &type) && get_body(&r, type, out, k, 0, &sb);
    }
    ok = ok && r.pos == r.len;
    bson_free(sb.s);
    if (!ok) {
        bson_reinit(out);
    }
    return ok;
}

bool
shl_keystring_split_record_id(const uint8_t *key, size_t len, size_t *key_len, int64_t *rid)
{
    uint64_t x = 0;
    if (len < SHL_KEYSTRING_RECORD_ID_SIZE) {
        return false;
    }
    for (size_t i = len - SHL_KEYSTRING_RECORD_ID_SIZE; i < len; i++) {
        x = (x << 8) | key[i];
    }
    *key_len = len - SHL_KEYSTRING_RECORD_ID_SIZE;
    *rid = (int64_t)(x ^ (UINT64_C(1) << 63));
    return true;
}
