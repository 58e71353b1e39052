/*
 * lsid.c -- logical session ids (lsid.h).
 */
#include "net/lsid.h"

#include <openssl/sha.h>
#include <stdio.h>
#include <string.h>

#include "bson/bson_iter.h"
#include "bson/bson_util.h"

/* SHA-256 of the empty string: the uid of every session while there is no authentication
 * (MongoDB digests the logged-in user's name; no user is the empty name). */
static const uint8_t empty_user_digest[SHL_LSID_UID_LEN] = {
    0xe3, 0xb0, 0xc4, 0x42, 0x98, 0xfc, 0x1c, 0x14, 0x9a, 0xfb, 0xf4, 0xc8, 0x99, 0x6f, 0xb9, 0x24,
    0x27, 0xae, 0x41, 0xe4, 0x64, 0x9b, 0x93, 0x4c, 0xa4, 0x95, 0x99, 0x1b, 0x78, 0x52, 0xb8, 0x55};

void
shl_lsid_user_digest(const char *user_at_db, uint8_t out[SHL_LSID_UID_LEN])
{
    SHA256((const unsigned char *)user_at_db, strlen(user_at_db), out);
}

int
shl_lsid_parse(const bson_t *doc, shl_lsid_t *out, shl_status_t *st)
{
    int ret = 0;
    bson_iter_t it;
    bool has_id = false;

    memset(out, 0, sizeof(*out));
    memcpy(out->uid, empty_user_digest, sizeof(out->uid));
    if (!bson_iter_init(&it, doc)) {
        SHL_FAIL(st, SHL_CODE_INVALID_BSON, "invalid lsid");
    }
    while (shl_iter_next(&it)) {
        const char *k = shl_iter_key(&it);
        bson_subtype_t sub = BSON_SUBTYPE_BINARY;
        uint32_t len = 0;
        const uint8_t *data = NULL;
        if (BSON_ITER_HOLDS_BINARY(&it)) {
            bson_iter_binary(&it, &sub, &len, &data);
        }
        if (strcmp(k, "id") == 0) {
            if (data == NULL) {
                SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH,
                         "BSON field 'OperationSessionInfo.lsid.id' is the wrong type '%s', "
                         "expected type 'binData'",
                         shl_bson_type_name(shl_iter_type(&it)));
            }
            if (sub != BSON_SUBTYPE_UUID) {
                SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH,
                         "BSON field 'OperationSessionInfo.lsid.id' is the wrong binData type "
                         "'%s', expected type 'UUID'",
                         shl_bson_binary_subtype_name(sub));
            }
            if (len != 16) {
                SHL_FAIL(st, SHL_CODE_INVALID_UUID,
                         "uuid must be a 16-byte binary field with UUID (4) subtype");
            }
            memcpy(out->id, data, 16);
            has_id = true;
        } else if (strcmp(k, "uid") == 0) {
            if (data == NULL) {
                SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH,
                         "BSON field 'OperationSessionInfo.lsid.uid' is the wrong type '%s', "
                         "expected type 'binData'",
                         shl_bson_type_name(shl_iter_type(&it)));
            }
            if (len != SHL_LSID_UID_LEN) {
                SHL_FAIL(st, SHL_CODE_UNSUPPORTED_FORMAT, "Unsupported SHA256Block hash length: %u",
                         len);
            }
            memcpy(out->uid, data, SHL_LSID_UID_LEN);
        } else if (strcmp(k, "txnUUID") == 0) {
            if (data == NULL || sub != BSON_SUBTYPE_UUID || len != 16) {
                SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH,
                         "BSON field 'OperationSessionInfo.lsid.txnUUID' is the wrong type '%s', "
                         "expected type 'UUID'",
                         shl_bson_type_name(shl_iter_type(&it)));
            }
            memcpy(out->txn_uuid, data, 16);
            out->child = true;
        } else if (strcmp(k, "txnNumber") == 0) {
            if (!BSON_ITER_HOLDS_INT64(&it)) {
                SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH,
                         "BSON field 'OperationSessionInfo.lsid.txnNumber' is the wrong type "
                         "'%s', expected type 'long'",
                         shl_bson_type_name(shl_iter_type(&it)));
            }
            out->has_parent_txn_number = true;
            out->parent_txn_number = bson_iter_int64(&it);
        } else {
            SHL_FAIL(st, SHL_CODE_IDL_UNKNOWN_FIELD,
                     "BSON field 'OperationSessionInfo.lsid.%s' is an unknown field.", k);
        }
    }
    if (!has_id) {
        SHL_FAIL(st, SHL_CODE_IDL_FAILED_TO_PARSE,
                 "BSON field 'OperationSessionInfo.lsid.id' is missing but a required field");
    }
    if (out->has_parent_txn_number && !out->child) {
        SHL_FAIL(st, SHL_CODE_INVALID_OPTIONS,
                 "Cannot specify txnNumber in lsid without specifying txnUUID");
    }
done:
    return ret;
}

/* The document {id: BinData(4, 16 bytes), uid: BinData(0, 32 bytes)}, laid out by hand:
 * every retryable write appends it twice (its oplog entry, config.transactions). */
#define LSID_DOC_LEN (4 + (1 + 3 + 4 + 1 + 16) + (1 + 4 + 4 + 1 + SHL_LSID_UID_LEN) + 1)

void
shl_lsid_append(bson_t *doc, const char *key, const shl_lsid_t *lsid)
{
    uint8_t buf[LSID_DOC_LEN];
    uint8_t *p = buf;
    bson_t sub;
    uint32_t len = LSID_DOC_LEN, n16 = 16, n32 = SHL_LSID_UID_LEN;

    memcpy(p, &len, 4); /* little-endian, as every target of this code is */
    p += 4;
    *p++ = BSON_TYPE_BINARY;
    memcpy(p, "id", 3);
    p += 3;
    memcpy(p, &n16, 4);
    p += 4;
    *p++ = BSON_SUBTYPE_UUID;
    memcpy(p, lsid->id, 16);
    p += 16;
    *p++ = BSON_TYPE_BINARY;
    memcpy(p, "uid", 4);
    p += 4;
    memcpy(p, &n32, 4);
    p += 4;
    *p++ = BSON_SUBTYPE_BINARY;
    memcpy(p, lsid->uid, SHL_LSID_UID_LEN);
    p += SHL_LSID_UID_LEN;
    *p++ = 0;
    SHL_INVARIANT(p == buf + LSID_DOC_LEN && bson_init_static(&sub, buf, LSID_DOC_LEN));
    if (!lsid->child) {
        bson_append_document(doc, key, -1, &sub);
    } else {
        bson_t full;
        bson_append_document_begin(doc, key, -1, &full);
        bson_concat(&full, &sub);
        if (lsid->has_parent_txn_number) {
            BSON_APPEND_INT64(&full, "txnNumber", lsid->parent_txn_number);
        }
        bson_append_binary(&full, "txnUUID", -1, BSON_SUBTYPE_UUID, lsid->txn_uuid, 16);
        bson_append_document_end(doc, &full);
    }
}

bool
shl_lsid_equal(const shl_lsid_t *a, const shl_lsid_t *b)
{
    return memcmp(a->id, b->id, sizeof(a->id)) == 0 &&
           memcmp(a->uid, b->uid, sizeof(a->uid)) == 0 && a->child == b->child &&
           (!a->child || (memcmp(a->txn_uuid, b->txn_uuid, sizeof(a->txn_uuid)) == 0 &&
                          a->has_parent_txn_number == b->has_parent_txn_number &&
                          a->parent_txn_number == b->parent_txn_number));
}

uint64_t
shl_lsid_hash(const shl_lsid_t *lsid)
{
    uint64_t h = 1469598103934665603ULL; /* FNV-1a over the id (random: enough) */

    for (size_t i = 0; i < sizeof(lsid->id); i++) {
        h = (h ^ lsid->id[i]) * 1099511628211ULL;
    }
    return h;
}

void
shl_lsid_id_string(const shl_lsid_t *lsid, char buf[37])
{
    const uint8_t *u = lsid->id;

    snprintf(buf, 37, "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0],
             u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13],
             u[14], u[15]);
}

void
shl_lsid_new(shl_lsid_t *out)
{
    memset(out, 0, sizeof(*out));
    shl_uuid_gen(out->id);
    memcpy(out->uid, empty_user_digest, sizeof(out->uid));
}

void
shl_lsid_parent(const shl_lsid_t *lsid, shl_lsid_t *out)
{
    shl_lsid_t p;

    memset(&p, 0, sizeof(p));
    memcpy(p.id, lsid->id, sizeof(p.id));
    memcpy(p.uid, lsid->uid, sizeof(p.uid));
    *out = p;
}

void
shl_lsid_new_child(const shl_lsid_t *parent, bool retryable, int64_t parent_txn_number,
                   shl_lsid_t *out)
{
    shl_lsid_parent(parent, out);
    out->child = true;
    shl_uuid_gen(out->txn_uuid);
    out->has_parent_txn_number = retryable;
    out->parent_txn_number = retryable ? parent_txn_number : 0;
}
