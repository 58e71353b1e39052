/*
 * validation.c -- schema validation (MongoDB's document validators): the create/collMod
 * options validator, validationLevel (strict | moderate | off) and validationAction
 * (error | warn), checked against the collection's catalog options by every user write
 * (insert, update, upsert, findAndModify) unless bypassDocumentValidation is set. Internal
 * writes (oplog replay, applyOps, migrations, range deletion, TTL) go to storage directly
 * or bypass it, as MongoDB's replication and migration writes do.
 */
#include <string.h>

#include "base/log.h"
#include "bson/bson_iter.h"
#include "bson/bson_util.h"
#include "db/db_private.h"
#include "db/storage_api.h"
#include "query/matcher.h"

/* What a validator may use: $expr, not $text/$where/$near (MongoDB's validator features). */
#define VALIDATOR_FEATURES SHL_MATCHER_ALLOW_EXPR

static bool
is_one_of(const char *s, const char *const *values)
{
    for (int i = 0; values[i] != NULL; i++) {
        if (strcmp(s, values[i]) == 0) {
            return true;
        }
    }
    return false;
}

static const char *const k_levels[] = {"off", "strict", "moderate", NULL};
static const char *const k_actions[] = {"error", "warn", NULL};

static int
check_enum(const char *cmd_name, const bson_t *cmd, const char *field, const char *const *values,
           shl_status_t *st)
{
    bson_iter_t it;
    int ret = 0;

    if (!shl_bson_iter_find_key(&it, cmd, field)) {
        goto done;
    }
    if (!BSON_ITER_HOLDS_UTF8(&it)) {
        SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH,
                 "BSON field '%s.%s' is the wrong type '%s', expected type 'string'", cmd_name,
                 field, shl_bson_type_name(shl_iter_type(&it)));
    }
    if (!is_one_of(bson_iter_utf8(&it, NULL), values)) {
        SHL_FAIL(st, SHL_CODE_BAD_VALUE,
                 "Enumeration value '%s' for field '%s.%s' is not a valid value.",
                 bson_iter_utf8(&it, NULL), cmd_name, field);
    }
done:
    return ret;
}

int
db_validation_options_check(const char *cmd_name, const bson_t *cmd, const shl_ns_t *ns,
                            shl_status_t *st)
{
    bson_iter_t it;
    shl_matcher_t *m = NULL;
    int ret = 0;

    SHL_ERR(check_enum(cmd_name, cmd, "validationLevel", k_levels, st));
    SHL_ERR(check_enum(cmd_name, cmd, "validationAction", k_actions, st));
    if (!shl_bson_iter_find_key(&it, cmd, "validator")) {
        goto done;
    }
    if (!BSON_ITER_HOLDS_DOCUMENT(&it)) {
        SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH,
                 "BSON field '%s.validator' is the wrong type '%s', expected type 'object'",
                 cmd_name, shl_bson_type_name(shl_iter_type(&it)));
    }
    {
        bson_t v;
        const uint8_t *data;
        uint32_t len;
        bson_iter_document(&it, &len, &data);
        bson_init_static(&v, data, len);
        if (bson_empty(&v)) {
            goto done; /* {} removes the validator */
        }
        if (strcmp(ns->db, "admin") == 0 || strcmp(ns->db, "local") == 0 ||
            strcmp(ns->db, "config") == 0) {
            SHL_FAIL(st, SHL_CODE_INVALID_OPTIONS,
                     "Document validators are not allowed on collection %s in the %s internal "
                     "database",
                     ns->full, ns->db);
        }
        if (strncmp(ns->coll, "system.", 7) == 0) {
            SHL_FAIL(st, SHL_CODE_INVALID_OPTIONS,
                     "Document validators not allowed on system collection %s", ns->full);
        }
        SHL_ERR(shl_matcher_new(&v, VALIDATOR_FEATURES, &m, st));
    }
done:
    shl_matcher_destroy(m);
    return ret;
}

int
db_validator_init(db_validator_t *v, const shl_collection_t *coll, bool bypass, shl_status_t *st)
{
    bson_iter_t it;
    int ret = 0;

    memset(v, 0, sizeof(*v));
    if (bypass || coll == NULL || coll->options == NULL) {
        goto done;
    }
    v->ns = coll->ns;
    if (shl_bson_iter_find_key(&it, coll->options, "validationLevel") && BSON_ITER_HOLDS_UTF8(&it)) {
        const char *level = bson_iter_utf8(&it, NULL);
        if (strcmp(level, "off") == 0) {
            goto done;
        }
        v->moderate = strcmp(level, "moderate") == 0;
    }
    if (shl_bson_iter_find_key(&it, coll->options, "validationAction") && BSON_ITER_HOLDS_UTF8(&it)) {
        v->warn = strcmp(bson_iter_utf8(&it, NULL), "warn") == 0;
    }
    if (shl_bson_iter_find_key(&it, coll->options, "validator") && BSON_ITER_HOLDS_DOCUMENT(&it)) {
        bson_t doc;
        const uint8_t *data;
        uint32_t len;
        bson_iter_document(&it, &len, &data);
        bson_init_static(&doc, data, len);
        bson_init_static(&v->spec, data, len);
        if (!bson_empty(&doc)) {
            SHL_ERR(shl_matcher_new(&doc, VALIDATOR_FEATURES, &v->m, st));
        }
    }
done:
    return ret;
}

void
db_validator_cleanup(db_validator_t *v)
{
    shl_matcher_destroy(v->m);
    v->m = NULL;
}

/* errInfo {failingDocumentId, details} of a document that failed 'v'. */
static void
append_err_info(const db_validator_t *v, const bson_t *doc, bson_t *info)
{
    bson_iter_t it;
    bson_t details;
    if (shl_bson_iter_find_key(&it, doc, "_id")) {
        bson_append_value(info, "failingDocumentId", -1, bson_iter_value(&it));
    }
    BSON_APPEND_DOCUMENT_BEGIN(info, "details", &details);
    db_validation_error_details(&v->spec, doc, &details);
    bson_append_document_end(info, &details);
}

/* DocumentValidationFailure with errInfo {failingDocumentId, details}. */
static int
validation_failure(const db_validator_t *v, const bson_t *doc, shl_status_t *st)
{
    bson_t extra = BSON_INITIALIZER, info;

    shl_status_set(st, SHL_CODE_DOCUMENT_VALIDATION_FAILURE, "Document failed validation");
    BSON_APPEND_DOCUMENT_BEGIN(&extra, "errInfo", &info);
    append_err_info(v, doc, &info);
    bson_append_document_end(&extra, &info);
    shl_status_set_extra(st, &extra); /* an _id too large to carry is dropped */
    bson_destroy(&extra);
    return SHL_CODE_DOCUMENT_VALIDATION_FAILURE;
}

int
db_validator_check(const db_validator_t *v, const bson_t *old_doc, const bson_t *new_doc,
                   shl_status_t *st)
{
    bool matched = false;
    int ret = 0;

    if (v->m == NULL) {
        goto done;
    }
    SHL_ERR(shl_matcher_match(v->m, new_doc, NULL, &matched, st));
    if (matched) {
        goto done;
    }
    if (old_doc != NULL && v->moderate) {
        /* moderate: a document that already failed validation may be updated freely. */
        bool old_ok = false;
        SHL_ERR(shl_matcher_match(v->m, old_doc, NULL, &old_ok, st));
        if (!old_ok) {
            goto done;
        }
    }
    if (v->warn) {
        bson_t info = BSON_INITIALIZER;
        append_err_info(v, new_doc, &info);
        SHL_LOG_WARNING(STORAGE, 20294, "Document would fail validation", "namespace",
                        BCON_UTF8(v->ns), "document", BCON_DOCUMENT(new_doc), "errInfo",
                        BCON_DOCUMENT(&info));
        bson_destroy(&info);
        goto done;
    }
    ret = validation_failure(v, new_doc, st);
done:
    return ret;
}
