/*
 * sharding_test_stub_hash.c -- TEST ONLY. A stand-in for bson/bson_hash.h's hashed-index
 * hash until main has it: deterministic (FNV-1a over the type bracket and the value's
 * bytes, numbers by their int64 value), not MongoDB's MD5-based hash. TODO(#6): delete.
 */
#include <bson/bson.h>
#include <stdint.h>
#include <string.h>

int64_t shl_bson_hash_value(const bson_value_t *v);

static uint64_t
fnv(uint64_t h, const void *p, size_t n)
{
    const uint8_t *b = p;
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= 1099511628211ull;
    }
    return h;
}

int64_t
shl_bson_hash_value(const bson_value_t *v)
{
    uint64_t h = 14695981039346656037ull;
    int64_t n;
    switch (v->value_type) {
    case BSON_TYPE_INT32:
        n = v->value.v_int32;
        h = fnv(fnv(h, "n", 1), &n, sizeof(n));
        break;
    case BSON_TYPE_INT64:
        n = v->value.v_int64;
        h = fnv(fnv(h, "n", 1), &n, sizeof(n));
        break;
    case BSON_TYPE_DOUBLE:
        n = (int64_t)v->value.v_double;
        h = fnv(fnv(h, "n", 1), &n, sizeof(n));
        break;
    case BSON_TYPE_UTF8:
        h = fnv(fnv(h, "s", 1), v->value.v_utf8.str, v->value.v_utf8.len);
        break;
    default: {
        uint8_t t = (uint8_t)v->value_type;
        h = fnv(h, &t, 1);
        break;
    }
    }
    return (int64_t)h;
}
