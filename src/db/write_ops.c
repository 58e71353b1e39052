/*
 * write_ops.c -- see write_ops.h.
 */
#include "bson/bson_iter.h"
#include "db/write_ops.h"

#include <string.h>

#include "bson/bson_util.h"
#include "net/command_args.h"
#include "net/message.h"

static const char *const update_fields[] = {
    "q",        "u", "upsert", "multi", "arrayFilters", "hint", "collation", "c", "upsertSupplied",
    "sampleId", NULL};
static const char *const delete_fields[] = {"q", "limit", "hint", "collation", "sampleId", NULL};

static int
check_stmt_fields(const bson_t *stmt, const char *prefix, const char *const *allowed,
                  shl_status_t *st)
{
    int ret = 0;
    bson_iter_t it;

    bson_iter_init(&it, stmt);
    while (shl_iter_next(&it)) {
        bool ok = false;
        for (int i = 0; allowed[i] != NULL && !ok; i++) {
            ok = strcmp(allowed[i], shl_iter_key(&it)) == 0;
        }
        if (!ok) {
            SHL_FAIL(st, SHL_CODE_IDL_UNKNOWN_FIELD, "BSON field '%s.%s' is an unknown field.",
                     prefix, shl_iter_key(&it));
        }
    }
done:
    return ret;
}

static int
view_field(const bson_t *stmt, const char *prefix, const char *field, bson_t *out, bool required,
           bool *found, shl_status_t *st)
{
    bson_iter_t it;
    const uint8_t *data;
    uint32_t len;

    *found = false;
    if (!bson_iter_init_find(&it, stmt, field)) {
        if (required) {
            return shl_status_set(st, SHL_CODE_IDL_FAILED_TO_PARSE,
                                  "BSON field '%s.%s' is missing but a required field", prefix,
                                  field);
        }
        return 0;
    }
    if (BSON_ITER_HOLDS_DOCUMENT(&it)) {
        bson_iter_document(&it, &len, &data);
    } else if (BSON_ITER_HOLDS_ARRAY(&it)) {
        bson_iter_array(&it, &len, &data);
    } else {
        return shl_status_set(st, SHL_CODE_TYPE_MISMATCH,
                              "BSON field '%s.%s' is the wrong type '%s', expected type 'object'",
                              prefix, field, shl_bson_type_name(shl_iter_type(&it)));
    }
    bson_init_static(out, data, len);
    *found = true;
    return 0;
}

static int
hint_field(const bson_t *stmt, bool *has, bson_value_t *out, shl_status_t *st)
{
    bson_iter_t it;
    *has = false;
    if (!bson_iter_init_find(&it, stmt, "hint")) {
        return 0;
    }
    if (!BSON_ITER_HOLDS_UTF8(&it) && !BSON_ITER_HOLDS_DOCUMENT(&it)) {
        return shl_status_set(st, SHL_CODE_FAILED_TO_PARSE, "hint must be a string or an object");
    }
    *out = *bson_iter_value(&it);
    /* An empty hint ({} or "") means no hint, as MongoDB treats it. */
    *has = !(BSON_ITER_HOLDS_UTF8(&it) && out->value.v_utf8.len == 0) &&
           !(BSON_ITER_HOLDS_DOCUMENT(&it) && out->value.v_doc.data_len <= 5);
    return 0;
}

static bool
is_replacement(const bson_t *u)
{
    bson_iter_t it;
    bool repl = true;
    if (bson_iter_init(&it, u) && shl_iter_next(&it)) {
        repl = shl_iter_key(&it)[0] != '$';
    }
    return repl;
}

int
shl_update_stmt_parse(const bson_t *stmt, shl_update_stmt_t *out, shl_status_t *st)
{
    int ret = 0;
    bool found;
    bson_iter_t it;

    memset(out, 0, sizeof(*out));
    SHL_ERR(check_stmt_fields(stmt, "update.updates", update_fields, st));
    SHL_ERR(view_field(stmt, "update.updates", "q", &out->q, true, &found, st));
    if (!bson_iter_init_find(&it, stmt, "u")) {
        SHL_FAIL(st, SHL_CODE_IDL_FAILED_TO_PARSE,
                 "BSON field 'update.updates.u' is missing but a required field");
    }
    out->u_pipeline = BSON_ITER_HOLDS_ARRAY(&it);
    SHL_ERR(view_field(stmt, "update.updates", "u", &out->u, true, &found, st));
    out->u_replacement = !out->u_pipeline && is_replacement(&out->u);
    SHL_ERR(shl_cmd_get_bool(stmt, "upsert", &out->upsert, st));
    SHL_ERR(shl_cmd_get_bool(stmt, "multi", &out->multi, st));
    if (out->multi && out->u_replacement && !bson_empty(&out->u)) {
        SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE,
                 "multi update is not supported for replacement-style update");
    }
    SHL_ERR(view_field(stmt, "update.updates", "arrayFilters", &out->array_filters, false,
                       &out->has_array_filters, st));
    SHL_ERR(view_field(stmt, "update.updates", "collation", &out->collation, false,
                       &out->has_collation, st));
    SHL_ERR(view_field(stmt, "update.updates", "c", &out->let, false, &out->has_let, st));
    SHL_ERR(hint_field(stmt, &out->has_hint, &out->hint, st));
done:
    return ret;
}

int
shl_delete_stmt_parse(const bson_t *stmt, shl_delete_stmt_t *out, shl_status_t *st)
{
    int ret = 0;
    bool found;
    bson_iter_t it;

    memset(out, 0, sizeof(*out));
    SHL_ERR(check_stmt_fields(stmt, "delete.deletes", delete_fields, st));
    SHL_ERR(view_field(stmt, "delete.deletes", "q", &out->q, true, &found, st));
    if (!bson_iter_init_find(&it, stmt, "limit")) {
        SHL_FAIL(st, SHL_CODE_IDL_FAILED_TO_PARSE,
                 "BSON field 'delete.deletes.limit' is missing but a required field");
    }
    if (!BSON_ITER_HOLDS_NUMBER(&it)) {
        SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH,
                 "BSON field 'delete.deletes.limit' is the wrong type '%s', expected types "
                 "'[long, int, decimal, double]'",
                 shl_bson_type_name(shl_iter_type(&it)));
    }
    {
        int64_t limit = bson_iter_as_int64(&it);
        if (limit != 0 && limit != 1) {
            SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE,
                     "The limit field in delete objects must be 0 or 1. Got %lld",
                     (long long)limit);
        }
        out->limit = (int32_t)limit;
    }
    SHL_ERR(view_field(stmt, "delete.deletes", "collation", &out->collation, false,
                       &out->has_collation, st));
    SHL_ERR(hint_field(stmt, &out->has_hint, &out->hint, st));
done:
    return ret;
}

void
shl_write_result_init(shl_write_result_t *res)
{
    memset(res, 0, sizeof(*res));
    bson_init(&res->upserted);
    bson_init(&res->write_errors);
    bson_init(&res->retried);
}

void
shl_write_result_cleanup(shl_write_result_t *res)
{
    bson_destroy(&res->upserted);
    bson_destroy(&res->write_errors);
    bson_destroy(&res->retried);
}

void
shl_write_result_add_retried(shl_write_result_t *res, int32_t stmt_id)
{
    char key[16];
    const char *k;

    bson_uint32_to_string(res->n_retried++, &k, key, sizeof(key));
    bson_append_int32(&res->retried, k, -1, stmt_id);
}

void
shl_write_result_add_error(shl_write_result_t *res, int32_t index, const shl_status_t *st)
{
    char key[16];
    const char *k;
    bson_t doc, extra;
    bson_iter_t it;

    bson_uint32_to_string(res->n_errors++, &k, key, sizeof(key));
    bson_append_document_begin(&res->write_errors, k, -1, &doc);
    BSON_APPEND_INT32(&doc, "index", index);
    BSON_APPEND_INT32(&doc, "code", st->code);
    if (shl_status_extra_get(st, &extra) && bson_iter_init(&it, &extra)) {
        while (shl_iter_next(&it)) {
            bson_append_iter(&doc, shl_iter_key(&it), -1, &it);
        }
    }
    BSON_APPEND_UTF8(&doc, "errmsg", st->reason);
    bson_append_document_end(&res->write_errors, &doc);
}

void
shl_write_result_add_upserted(shl_write_result_t *res, int32_t index, const bson_value_t *id)
{
    char key[16];
    const char *k;
    bson_t doc;

    bson_uint32_to_string(res->n_upserted++, &k, key, sizeof(key));
    bson_append_document_begin(&res->upserted, k, -1, &doc);
    BSON_APPEND_INT32(&doc, "index", index);
    BSON_APPEND_VALUE(&doc, "_id", id);
    bson_append_document_end(&res->upserted, &doc);
}

void
shl_write_result_append(const shl_write_result_t *res, bool is_update, bson_t *reply)
{
    BSON_APPEND_INT32(reply, "n", (int32_t)res->n);
    if (is_update) {
        if (res->n_upserted > 0) {
            BSON_APPEND_ARRAY(reply, "upserted", &res->upserted);
        }
        BSON_APPEND_INT32(reply, "nModified", (int32_t)res->n_modified);
    }
    if (res->n_errors > 0) {
        BSON_APPEND_ARRAY(reply, "writeErrors", &res->write_errors);
    }
    if (res->n_retried > 0) {
        BSON_APPEND_ARRAY(reply, "retriedStmtIds", &res->retried);
    }
}

int
shl_write_batch_check(const char *cmd, const char *field, uint32_t n, shl_status_t *st)
{
    if (n == 0) {
        return shl_status_set(st, SHL_CODE_INVALID_LENGTH,
                              "Write batch sizes must be between 1 "
                              "and %d. Got 0 operations.",
                              SHL_MAX_WRITE_BATCH);
    }
    if (n > SHL_MAX_WRITE_BATCH) {
        return shl_status_set(st, SHL_CODE_INVALID_LENGTH,
                              "Write batch sizes must be between 1 and %d. Got %u operations.",
                              SHL_MAX_WRITE_BATCH, n);
    }
    (void)cmd;
    (void)field;
    return 0;
}
