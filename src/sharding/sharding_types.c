/*
 * sharding_types.c -- see sharding_types.h. The IDL-style readers reproduce the error texts
 * MongoDB's generated parsers give for the config.* and version documents.
 */
#include "bson/bson_iter.h"
#include "sharding/sharding_types.h"

#include <stdio.h>
#include <string.h>

#include "bson/bson_util.h"

shl_uuid_t
shl_uuid_new(void)
{
    shl_uuid_t u;
    shl_uuid_gen(u.bytes);
    return u;
}

bool
shl_uuid_eq(const shl_uuid_t *a, const shl_uuid_t *b)
{
    return memcmp(a->bytes, b->bytes, sizeof(a->bytes)) == 0;
}

void
shl_uuid_to_string(const shl_uuid_t *u, char buf[37])
{
    static const char hex[] = "0123456789abcdef";
    size_t o = 0;
    for (int i = 0; i < 16; i++) {
        if (i == 4 || i == 6 || i == 8 || i == 10) {
            buf[o++] = '-';
        }
        buf[o++] = hex[u->bytes[i] >> 4];
        buf[o++] = hex[u->bytes[i] & 0xf];
    }
    buf[o] = '\0';
}

void
shl_ts_to_string(shl_ts_t ts, char buf[40])
{
    snprintf(buf, 40, "Timestamp(%u, %u)", ts.t, ts.i);
}

void
shl_ts_append(bson_t *b, const char *key, shl_ts_t ts)
{
    bson_append_timestamp(b, key, -1, ts.t, ts.i);
}

void
shl_uuid_append(bson_t *b, const char *key, const shl_uuid_t *u)
{
    shl_bson_append_uuid(b, key, u->bytes);
}

int
shl_idl_wrong_type(const bson_iter_t *it, const char *ctx, const char *want, shl_status_t *st)
{
    return shl_status_set(st, SHL_CODE_TYPE_MISMATCH,
                          "BSON field '%s.%s' is the wrong type '%s', expected type '%s'", ctx,
                          shl_iter_key(it), shl_bson_type_name(shl_iter_type(it)), want);
}

int
shl_idl_missing(const char *ctx, const char *field, shl_status_t *st)
{
    return shl_status_set(st, SHL_CODE_IDL_FAILED_TO_PARSE,
                          "BSON field '%s.%s' is missing but a required field", ctx, field);
}

int
shl_idl_read_ts(const bson_iter_t *it, const char *ctx, shl_ts_t *out, shl_status_t *st)
{
    if (!BSON_ITER_HOLDS_TIMESTAMP(it)) {
        return shl_idl_wrong_type(it, ctx, "timestamp", st);
    }
    bson_iter_timestamp(it, &out->t, &out->i);
    return 0;
}

int
shl_idl_read_uuid(const bson_iter_t *it, const char *ctx, shl_uuid_t *out, shl_status_t *st)
{
    bson_subtype_t sub;
    uint32_t len;
    const uint8_t *data;

    if (!BSON_ITER_HOLDS_BINARY(it)) {
        return shl_idl_wrong_type(it, ctx, "binData", st);
    }
    bson_iter_binary(it, &sub, &len, &data);
    if (sub != BSON_SUBTYPE_UUID) {
        return shl_status_set(st, SHL_CODE_TYPE_MISMATCH,
                              "BSON field '%s.%s' is the wrong binData type '%d', expected type "
                              "'%d'",
                              ctx, shl_iter_key(it), (int)sub, (int)BSON_SUBTYPE_UUID);
    }
    if (len != sizeof(out->bytes)) {
        return shl_status_set(st, SHL_CODE_INVALID_UUID,
                              "uuid must be a 16-byte binary field with UUID (4) subtype");
    }
    memcpy(out->bytes, data, sizeof(out->bytes));
    return 0;
}

int
shl_idl_read_oid(const bson_iter_t *it, const char *ctx, bson_oid_t *out, shl_status_t *st)
{
    if (!BSON_ITER_HOLDS_OID(it)) {
        return shl_idl_wrong_type(it, ctx, "objectId", st);
    }
    bson_oid_copy(bson_iter_oid(it), out);
    return 0;
}

int
shl_idl_read_int32(const bson_iter_t *it, const char *ctx, int32_t *out, shl_status_t *st)
{
    if (!BSON_ITER_HOLDS_INT32(it)) {
        return shl_idl_wrong_type(it, ctx, "int", st);
    }
    *out = bson_iter_int32(it);
    return 0;
}

int
shl_idl_read_bool(const bson_iter_t *it, const char *ctx, bool *out, shl_status_t *st)
{
    if (!BSON_ITER_HOLDS_BOOL(it)) {
        return shl_idl_wrong_type(it, ctx, "bool", st);
    }
    *out = bson_iter_bool(it);
    return 0;
}

int
shl_idl_read_doc(const bson_iter_t *it, const char *ctx, bson_t *view, shl_status_t *st)
{
    uint32_t len;
    const uint8_t *data;

    if (!BSON_ITER_HOLDS_DOCUMENT(it)) {
        return shl_idl_wrong_type(it, ctx, "object", st);
    }
    bson_iter_document(it, &len, &data);
    SHL_INVARIANT(bson_init_static(view, data, len));
    return 0;
}
