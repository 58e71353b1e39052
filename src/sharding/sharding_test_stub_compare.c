/*
 * sharding_test_stub_compare.c -- TEST ONLY. A stand-in for src/bson/bson_compare.c so the
 * sharding unit tests link before main has the bson module. It covers the types the tests
 * use (MinKey, null, numbers without decimal128, strings, documents, arrays, ObjectId, bool,
 * date, timestamp, MaxKey) in MongoDB's order. TODO(#6): delete once main has shl_bson.
 */
#include <stdlib.h>
#include <string.h>

#include "bson/bson_compare.h"

int
shl_bson_canonical_type(bson_type_t t)
{
    switch (t) {
    case BSON_TYPE_MINKEY:
        return -1;
    case BSON_TYPE_EOD:
    case BSON_TYPE_UNDEFINED:
        return 0;
    case BSON_TYPE_NULL:
        return 5;
    case BSON_TYPE_DOUBLE:
    case BSON_TYPE_INT32:
    case BSON_TYPE_INT64:
    case BSON_TYPE_DECIMAL128:
        return 10;
    case BSON_TYPE_UTF8:
    case BSON_TYPE_SYMBOL:
        return 15;
    case BSON_TYPE_DOCUMENT:
        return 20;
    case BSON_TYPE_ARRAY:
        return 25;
    case BSON_TYPE_BINARY:
        return 30;
    case BSON_TYPE_OID:
        return 35;
    case BSON_TYPE_BOOL:
        return 40;
    case BSON_TYPE_DATE_TIME:
        return 45;
    case BSON_TYPE_TIMESTAMP:
        return 47;
    case BSON_TYPE_REGEX:
        return 50;
    case BSON_TYPE_MAXKEY:
        return 127;
    default:
        return -128;
    }
}

static int
sign(long double d)
{
    return d < 0 ? -1 : (d > 0 ? 1 : 0);
}

static long double
num(const bson_value_t *v)
{
    switch (v->value_type) {
    case BSON_TYPE_INT32:
        return v->value.v_int32;
    case BSON_TYPE_INT64:
        return (long double)v->value.v_int64;
    case BSON_TYPE_DOUBLE:
        return v->value.v_double;
    default:
        abort();
    }
}

static int compare_docs(const uint8_t *a, uint32_t alen, const uint8_t *b, uint32_t blen,
                        bool names);

int
shl_bson_value_compare(const bson_value_t *a, const bson_value_t *b)
{
    int ca = shl_bson_canonical_type(a->value_type), cb = shl_bson_canonical_type(b->value_type);
    if (ca != cb) {
        return ca < cb ? -1 : 1;
    }
    switch (a->value_type) {
    case BSON_TYPE_MINKEY:
    case BSON_TYPE_MAXKEY:
    case BSON_TYPE_NULL:
    case BSON_TYPE_UNDEFINED:
        return 0;
    case BSON_TYPE_INT32:
    case BSON_TYPE_INT64:
    case BSON_TYPE_DOUBLE:
        if (a->value_type == BSON_TYPE_INT64 && b->value_type == BSON_TYPE_INT64) {
            return a->value.v_int64 < b->value.v_int64 ? -1 : (a->value.v_int64 > b->value.v_int64);
        }
        return sign(num(a) - num(b));
    case BSON_TYPE_UTF8: {
        uint32_t la = a->value.v_utf8.len, lb = b->value.v_utf8.len;
        int c = memcmp(a->value.v_utf8.str, b->value.v_utf8.str, la < lb ? la : lb);
        return c != 0 ? (c < 0 ? -1 : 1) : (la < lb ? -1 : (la > lb));
    }
    case BSON_TYPE_DOCUMENT:
    case BSON_TYPE_ARRAY:
        return compare_docs(a->value.v_doc.data, a->value.v_doc.data_len, b->value.v_doc.data,
                            b->value.v_doc.data_len, a->value_type == BSON_TYPE_DOCUMENT);
    case BSON_TYPE_OID: {
        int c = memcmp(a->value.v_oid.bytes, b->value.v_oid.bytes, 12);
        return c < 0 ? -1 : (c > 0);
    }
    case BSON_TYPE_BOOL:
        return (int)a->value.v_bool - (int)b->value.v_bool;
    case BSON_TYPE_DATE_TIME:
        return a->value.v_datetime < b->value.v_datetime
                   ? -1
                   : (a->value.v_datetime > b->value.v_datetime);
    case BSON_TYPE_TIMESTAMP:
        if (a->value.v_timestamp.timestamp != b->value.v_timestamp.timestamp) {
            return a->value.v_timestamp.timestamp < b->value.v_timestamp.timestamp ? -1 : 1;
        }
        return a->value.v_timestamp.increment < b->value.v_timestamp.increment
                   ? -1
                   : (a->value.v_timestamp.increment > b->value.v_timestamp.increment);
    default:
        abort();
    }
}

static int
compare_docs(const uint8_t *a, uint32_t alen, const uint8_t *b, uint32_t blen, bool names)
{
    bson_t da, db;
    bson_iter_t ia, ib;
    bson_init_static(&da, a, alen);
    bson_init_static(&db, b, blen);
    bson_iter_init(&ia, &da);
    bson_iter_init(&ib, &db);
    for (;;) {
        bool ma = bson_iter_next(&ia), mb = bson_iter_next(&ib);
        if (!ma || !mb) {
            return ma == mb ? 0 : (ma ? 1 : -1);
        }
        int ca = shl_bson_canonical_type(bson_iter_type(&ia));
        int cb = shl_bson_canonical_type(bson_iter_type(&ib));
        if (ca != cb) {
            return ca < cb ? -1 : 1;
        }
        if (names) {
            int c = strcmp(bson_iter_key(&ia), bson_iter_key(&ib));
            if (c != 0) {
                return c < 0 ? -1 : 1;
            }
        }
        int c = shl_bson_iter_compare(&ia, &ib);
        if (c != 0) {
            return c;
        }
    }
}

int
shl_bson_iter_compare(const bson_iter_t *a, const bson_iter_t *b)
{
    return shl_bson_value_compare(bson_iter_value((bson_iter_t *)(uintptr_t)a),
                                  bson_iter_value((bson_iter_t *)(uintptr_t)b));
}

int
shl_bson_doc_compare(const bson_t *a, const bson_t *b)
{
    return compare_docs(bson_get_data(a), a->len, bson_get_data(b), b->len, true);
}

bool
shl_bson_value_equal(const bson_value_t *a, const bson_value_t *b)
{
    return shl_bson_value_compare(a, b) == 0;
}
