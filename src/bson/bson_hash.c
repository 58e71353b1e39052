/*
 * bson_hash.c -- BSONElementHasher::hash64 (bson_hash.h). The serialization follows
 * MongoDB's hasher.cpp: seed (int32 LE); per element its canonical type (int32 LE), the
 * field name with its NUL (inside documents only), then numbers as safeNumberLongForHash
 * (int64 LE), documents/arrays/CodeWScope scopes element by element closed by an EOO
 * element (canonical type 0, no name), CodeWScope's code with its NUL first, and any other
 * type's raw BSON value bytes.
 */
#include "bson/bson_hash.h"

#include <stdbool.h>
#include <string.h>

#include "base/status.h"
#include "bson/bson_compare.h"
#include "bson/bson_iter.h"
#include "bson/bson_util.h"
#include "bson/md5.h"

/* Where the serialized value goes: MD5 (MongoDB's hashed-index hash) or FNV-1a 64 (the fast
 * hash with the same equality classes, for hash tables). */
typedef struct hash_sink {
    bool md5;
    shl_md5_t m;
    uint64_t fnv;
} hash_sink_t;

static void
add(hash_sink_t *ctx, const void *p, size_t n)
{
    if (ctx->md5) {
        shl_md5_update(&ctx->m, p, n);
    } else {
        const uint8_t *b = p;
        uint64_t h = ctx->fnv;
        for (size_t i = 0; i < n; i++) {
            h = (h ^ b[i]) * UINT64_C(1099511628211);
        }
        ctx->fnv = h;
    }
}

static void
add_le32(hash_sink_t *ctx, uint32_t v)
{
    uint8_t b[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
    add(ctx, b, sizeof(b));
}

static void
add_le64(hash_sink_t *ctx, uint64_t v)
{
    add_le32(ctx, (uint32_t)v);
    add_le32(ctx, (uint32_t)(v >> 32));
}

/* A BSON string value: int32 length with the NUL, the bytes, the NUL. */
static void
add_bson_string(hash_sink_t *ctx, const char *s, uint32_t len)
{
    add_le32(ctx, len + 1);
    add(ctx, s, len);
    add(ctx, "", 1);
}

static void hash_element(hash_sink_t *ctx, const bson_value_t *v, const char *name, size_t nlen);

/* Every element with its name, then the EOO element. */
static void
hash_doc(hash_sink_t *ctx, const uint8_t *data, uint32_t len)
{
    bson_iter_t it;
    if (bson_iter_init_from_data(&it, data, len)) {
        while (shl_iter_next(&it)) {
            hash_element(ctx, bson_iter_value(&it), shl_iter_key(&it), shl_iter_key_len(&it));
        }
    }
    add_le32(ctx, 0); /* EOO: canonical type 0, no field name, no value */
}

/* BSONElement::safeNumberLongForHash. */
static int64_t
number_for_hash(const bson_value_t *v)
{
    if (v->value_type == BSON_TYPE_DOUBLE && v->value.v_double == 9223372036854775808.0) {
        return INT64_MIN; /* kept from older versions' overflowing cast */
    }
    return shl_bson_value_safe_int64(v);
}

static void
hash_element(hash_sink_t *ctx, const bson_value_t *v, const char *name, size_t nlen)
{
    add_le32(ctx, (uint32_t)shl_bson_canonical_type(v->value_type));
    if (name != NULL) {
        add(ctx, name, nlen + 1);
    }
    switch (v->value_type) {
    case BSON_TYPE_INT32:
    case BSON_TYPE_INT64:
    case BSON_TYPE_DOUBLE:
    case BSON_TYPE_DECIMAL128:
        add_le64(ctx, (uint64_t)number_for_hash(v));
        break;
    case BSON_TYPE_DOCUMENT:
    case BSON_TYPE_ARRAY:
        hash_doc(ctx, v->value.v_doc.data, v->value.v_doc.data_len);
        break;
    case BSON_TYPE_CODEWSCOPE:
        add(ctx, v->value.v_codewscope.code, v->value.v_codewscope.code_len);
        add(ctx, "", 1);
        hash_doc(ctx, v->value.v_codewscope.scope_data, v->value.v_codewscope.scope_len);
        break;
    case BSON_TYPE_UTF8:
        add_bson_string(ctx, v->value.v_utf8.str, v->value.v_utf8.len);
        break;
    case BSON_TYPE_SYMBOL:
        add_bson_string(ctx, v->value.v_symbol.symbol, v->value.v_symbol.len);
        break;
    case BSON_TYPE_CODE:
        add_bson_string(ctx, v->value.v_code.code, v->value.v_code.code_len);
        break;
    case BSON_TYPE_BINARY: {
        uint32_t len = v->value.v_binary.data_len;
        uint8_t subtype = (uint8_t)v->value.v_binary.subtype;
        if (subtype == BSON_SUBTYPE_BINARY_DEPRECATED) {
            /* libbson hides the inner length of subtype 2; the raw value holds it */
            add_le32(ctx, len + 4);
            add(ctx, &subtype, 1);
            add_le32(ctx, len);
        } else {
            add_le32(ctx, len);
            add(ctx, &subtype, 1);
        }
        add(ctx, v->value.v_binary.data, len);
        break;
    }
    case BSON_TYPE_OID:
        add(ctx, v->value.v_oid.bytes, 12);
        break;
    case BSON_TYPE_BOOL: {
        uint8_t b = v->value.v_bool ? 1 : 0;
        add(ctx, &b, 1);
        break;
    }
    case BSON_TYPE_DATE_TIME:
        add_le64(ctx, (uint64_t)v->value.v_datetime);
        break;
    case BSON_TYPE_TIMESTAMP:
        add_le32(ctx, v->value.v_timestamp.increment);
        add_le32(ctx, v->value.v_timestamp.timestamp);
        break;
    case BSON_TYPE_REGEX:
        add(ctx, v->value.v_regex.regex, strlen(v->value.v_regex.regex) + 1);
        add(ctx, v->value.v_regex.options, strlen(v->value.v_regex.options) + 1);
        break;
    case BSON_TYPE_DBPOINTER:
        add_bson_string(ctx, v->value.v_dbpointer.collection, v->value.v_dbpointer.collection_len);
        add(ctx, v->value.v_dbpointer.oid.bytes, 12);
        break;
    default:
        /* MinKey, MaxKey, Null, Undefined: no value bytes. */
        break;
    }
}

int64_t
shl_bson_hash_value(const bson_value_t *v, int32_t seed)
{
    hash_sink_t ctx = {.md5 = true};
    uint8_t digest[16];
    uint64_t h = 0;

    shl_md5_init(&ctx.m);
    add_le32(&ctx, (uint32_t)seed);
    hash_element(&ctx, v, NULL, 0);
    shl_md5_final(&ctx.m, digest);
    for (int i = 7; i >= 0; i--) {
        h = (h << 8) | digest[i];
    }
    return (int64_t)h;
}

uint64_t
shl_bson_hash_fast(const bson_value_t *v)
{
    hash_sink_t ctx = {.md5 = false, .fnv = UINT64_C(14695981039346656037)};

    hash_element(&ctx, v, NULL, 0);
    /* A final mix so the low bits (bucket indexes) depend on every byte. */
    ctx.fnv ^= ctx.fnv >> 33;
    ctx.fnv *= UINT64_C(0xff51afd7ed558ccd);
    ctx.fnv ^= ctx.fnv >> 33;
    return ctx.fnv;
}

int64_t
shl_bson_hash_iter(const bson_iter_t *it, int32_t seed)
{
    bson_iter_t copy = *it;
    return shl_bson_hash_value(bson_iter_value(&copy), seed);
}
