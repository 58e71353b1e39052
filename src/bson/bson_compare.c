/*
 * bson_compare.c -- MongoDB's canonical order over BSON values (BSONElement::compareElements
 * and BSONObj::woCompare with field names considered). Numbers of the same kind compare
 * natively; anything involving decimal128 goes through the exact shl_num_t representation.
 */
#include "bson/bson_compare.h"

#include <math.h>
#include <string.h>

#include "bson/bson_iter.h"
#include "bson/bson_private.h"

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
    case BSON_TYPE_DBPOINTER:
        return 55;
    case BSON_TYPE_CODE:
        return 60;
    case BSON_TYPE_CODEWSCOPE:
        return 65;
    case BSON_TYPE_MAXKEY:
        return 127;
    default:
        return -128; /* not a BSON type; sorts first, like MongoDB's sentinel */
    }
}

static int
cmp_i64(int64_t a, int64_t b)
{
    return a == b ? 0 : a < b ? -1 : 1;
}

static int
cmp_u64(uint64_t a, uint64_t b)
{
    return a == b ? 0 : a < b ? -1 : 1;
}

static int
sign_of(int c)
{
    return c == 0 ? 0 : c < 0 ? -1 : 1;
}

/* NaN equals NaN and sorts below every other number; -0 equals 0. */
static int
cmp_double(double a, double b)
{
    if (a < b) {
        return -1;
    }
    if (a > b) {
        return 1;
    }
    if (a == b) {
        return 0;
    }
    if (isnan(a)) {
        return isnan(b) ? 0 : -1;
    }
    return 1;
}

/* Exact: int64 values beyond 2^53 are not rounded to a double. */
static int
cmp_i64_double(int64_t l, double r)
{
    const int64_t exact = INT64_C(1) << 53;
    if (isnan(r)) {
        return 1;
    }
    if (l >= -exact && l <= exact) {
        return cmp_double((double)l, r); /* (double)l is exact here */
    }
    if (r >= 9223372036854775808.0) {
        return -1;
    }
    if (r < -9223372036854775808.0) {
        return 1;
    }
    /* |l| > 2^53: any r that truncates to l has no fractional part, so truncation decides. */
    return cmp_i64(l, (int64_t)r);
}

static int
cmp_numbers(const bson_value_t *a, const bson_value_t *b)
{
    bson_type_t ta = a->value_type, tb = b->value_type;

    if (ta == BSON_TYPE_DECIMAL128 || tb == BSON_TYPE_DECIMAL128) {
        shl_num_t na, nb;
        shl_num_from_value(a, &na);
        shl_num_from_value(b, &nb);
        return shl_num_compare(&na, &nb);
    }
    if (ta == BSON_TYPE_DOUBLE && tb == BSON_TYPE_DOUBLE) {
        return cmp_double(a->value.v_double, b->value.v_double);
    }
    if (ta == BSON_TYPE_DOUBLE) {
        int64_t lb = tb == BSON_TYPE_INT32 ? b->value.v_int32 : b->value.v_int64;
        return -cmp_i64_double(lb, a->value.v_double);
    }
    int64_t la = ta == BSON_TYPE_INT32 ? a->value.v_int32 : a->value.v_int64;
    if (tb == BSON_TYPE_DOUBLE) {
        return cmp_i64_double(la, b->value.v_double);
    }
    return cmp_i64(la, tb == BSON_TYPE_INT32 ? b->value.v_int32 : b->value.v_int64);
}

/* Byte-wise, then the shorter first (strings may hold NULs). */
static int
cmp_bytes(const void *a, size_t alen, const void *b, size_t blen)
{
    int c = memcmp(a, b, alen < blen ? alen : blen);
    if (c != 0) {
        return sign_of(c);
    }
    return alen == blen ? 0 : alen < blen ? -1 : 1;
}

static int cmp_docs(const uint8_t *a, uint32_t alen, const uint8_t *b, uint32_t blen,
                    const shl_collator_t *coll);

/* Two values of the same canonical type. */
static int
cmp_same_canonical(const bson_value_t *a, const bson_value_t *b, const shl_collator_t *coll)
{
    switch (a->value_type) {
    case BSON_TYPE_DOUBLE:
    case BSON_TYPE_INT32:
    case BSON_TYPE_INT64:
    case BSON_TYPE_DECIMAL128:
        return cmp_numbers(a, b);
    case BSON_TYPE_UTF8:
    case BSON_TYPE_SYMBOL: {
        const char *sa, *sb;
        uint32_t la, lb;
        if (a->value_type == BSON_TYPE_UTF8) {
            sa = a->value.v_utf8.str;
            la = a->value.v_utf8.len;
        } else {
            sa = a->value.v_symbol.symbol;
            la = a->value.v_symbol.len;
        }
        if (b->value_type == BSON_TYPE_UTF8) {
            sb = b->value.v_utf8.str;
            lb = b->value.v_utf8.len;
        } else {
            sb = b->value.v_symbol.symbol;
            lb = b->value.v_symbol.len;
        }
        return coll != NULL ? shl_collator_compare(coll, sa, la, sb, lb) : cmp_bytes(sa, la, sb, lb);
    }
    case BSON_TYPE_DOCUMENT:
    case BSON_TYPE_ARRAY:
        return cmp_docs(a->value.v_doc.data, a->value.v_doc.data_len, b->value.v_doc.data,
                        b->value.v_doc.data_len, coll);
    case BSON_TYPE_BINARY: {
        int c = cmp_u64(a->value.v_binary.data_len, b->value.v_binary.data_len);
        if (c == 0) {
            c = cmp_u64(a->value.v_binary.subtype, b->value.v_binary.subtype);
        }
        if (c == 0 && a->value.v_binary.data_len > 0) { /* a copied empty value has NULL data */
            c = sign_of(
                memcmp(a->value.v_binary.data, b->value.v_binary.data, a->value.v_binary.data_len));
        }
        return c;
    }
    case BSON_TYPE_OID:
        return sign_of(memcmp(a->value.v_oid.bytes, b->value.v_oid.bytes, 12));
    case BSON_TYPE_BOOL:
        return (int)a->value.v_bool - (int)b->value.v_bool;
    case BSON_TYPE_DATE_TIME:
        return cmp_i64(a->value.v_datetime, b->value.v_datetime);
    case BSON_TYPE_TIMESTAMP: {
        int c = cmp_u64(a->value.v_timestamp.timestamp, b->value.v_timestamp.timestamp);
        return c != 0 ? c : cmp_u64(a->value.v_timestamp.increment, b->value.v_timestamp.increment);
    }
    case BSON_TYPE_REGEX: {
        int c = sign_of(strcmp(a->value.v_regex.regex, b->value.v_regex.regex));
        return c != 0 ? c : sign_of(strcmp(a->value.v_regex.options, b->value.v_regex.options));
    }
    case BSON_TYPE_DBPOINTER: {
        /* MongoDB compares the value's size first, i.e. the namespace length. */
        int c = cmp_u64(a->value.v_dbpointer.collection_len, b->value.v_dbpointer.collection_len);
        if (c == 0) {
            c = sign_of(memcmp(a->value.v_dbpointer.collection, b->value.v_dbpointer.collection,
                               a->value.v_dbpointer.collection_len));
        }
        if (c == 0) {
            c = sign_of(memcmp(a->value.v_dbpointer.oid.bytes, b->value.v_dbpointer.oid.bytes, 12));
        }
        return c;
    }
    case BSON_TYPE_CODE:
        return cmp_bytes(a->value.v_code.code, a->value.v_code.code_len, b->value.v_code.code,
                         b->value.v_code.code_len);
    case BSON_TYPE_CODEWSCOPE: {
        int c = cmp_bytes(a->value.v_codewscope.code, a->value.v_codewscope.code_len,
                          b->value.v_codewscope.code, b->value.v_codewscope.code_len);
        if (c == 0) {
            c = cmp_docs(a->value.v_codewscope.scope_data, a->value.v_codewscope.scope_len,
                         b->value.v_codewscope.scope_data, b->value.v_codewscope.scope_len, NULL);
        }
        return c;
    }
    default:
        /* MinKey, MaxKey, Null, Undefined, EOO: equal within their canonical type. */
        return 0;
    }
}

int
shl_bson_value_compare_coll(const bson_value_t *a, const bson_value_t *b,
                            const shl_collator_t *coll)
{
    int ca = shl_bson_canonical_type(a->value_type);
    int cb = shl_bson_canonical_type(b->value_type);
    if (ca != cb) {
        return ca < cb ? -1 : 1;
    }
    return cmp_same_canonical(a, b, coll);
}

int
shl_bson_value_compare(const bson_value_t *a, const bson_value_t *b)
{
    return shl_bson_value_compare_coll(a, b, NULL);
}

/* Element of a document: canonical type, then field name, then value. */
static int
cmp_elements(bson_iter_t *a, bson_iter_t *b, const shl_collator_t *coll)
{
    int ca = shl_bson_canonical_type(shl_iter_type(a));
    int cb = shl_bson_canonical_type(shl_iter_type(b));
    if (ca != cb) {
        return ca < cb ? -1 : 1;
    }
    int c = sign_of(strcmp(shl_iter_key(a), shl_iter_key(b)));
    if (c != 0) {
        return c;
    }
    return cmp_same_canonical(bson_iter_value(a), bson_iter_value(b), coll);
}

/* Embedded documents and arrays (arrays as documents keyed "0", "1", ...); a document
 * libbson cannot iterate compares as empty (BSON is validated where it enters). */
static int
cmp_docs(const uint8_t *a, uint32_t alen, const uint8_t *b, uint32_t blen,
         const shl_collator_t *coll)
{
    bson_iter_t ia, ib;
    bool ma = bson_iter_init_from_data(&ia, a, alen);
    bool mb = bson_iter_init_from_data(&ib, b, blen);

    for (;;) {
        ma = ma && shl_iter_next(&ia);
        mb = mb && shl_iter_next(&ib);
        if (!ma || !mb) {
            return ma == mb ? 0 : ma ? 1 : -1;
        }
        int c = cmp_elements(&ia, &ib, coll);
        if (c != 0) {
            return c;
        }
    }
}

int
shl_bson_iter_compare(const bson_iter_t *a, const bson_iter_t *b)
{
    bson_iter_t ia = *a, ib = *b;
    return shl_bson_value_compare(bson_iter_value(&ia), bson_iter_value(&ib));
}

int
shl_bson_doc_compare(const bson_t *a, const bson_t *b)
{
    return cmp_docs(bson_get_data(a), a->len, bson_get_data(b), b->len, NULL);
}

int
shl_bson_doc_compare_coll(const bson_t *a, const bson_t *b, const shl_collator_t *coll)
{
    return cmp_docs(bson_get_data(a), a->len, bson_get_data(b), b->len, coll);
}

bool
shl_bson_value_equal(const bson_value_t *a, const bson_value_t *b)
{
    return shl_bson_value_compare(a, b) == 0;
}
