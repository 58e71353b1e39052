/*
 * view_rewrite.c -- a read on a view as the aggregate that runs it (MongoDB's
 * query_request_conversion): the view's resolved pipeline, then the stages the command
 * stands for; and the aggregate's reply turned back into the command's. Shared by the data
 * node (db/views.c) and the router (a view on a sharded collection). See
 * docs/design/views.md.
 */
#include <string.h>

#include "bson/bson_iter.h"
#include "bson/bson_util.h"
#include "bson/collation.h"
#include "query/view_rewrite.h"

void
shl_view_append_stages(const bson_t *doc, const char *field, bson_t *arr, uint32_t *n)
{
    bson_iter_t it, sub;
    if (bson_iter_init_find(&it, doc, field) && BSON_ITER_HOLDS_ARRAY(&it) &&
        bson_iter_recurse(&it, &sub)) {
        while (shl_iter_next(&sub)) {
            char k[16];
            const char *kp;
            bson_uint32_to_string((*n)++, &kp, k, sizeof(k));
            bson_append_iter(arr, kp, -1, &sub);
        }
    }
}


/* find options an aggregate cannot express (MongoDB: InvalidPipelineOperator). */
static const char *const find_refused[] = {"tailable", "awaitData", "noCursorTimeout",
                                           "allowPartialResults", "returnKey", "showRecordId",
                                           "min", "max", "resumeAfter", "$_requestResumeToken",
                                           NULL};

/* Fields of a command that its aggregate takes as they are (generic arguments and these). */
static bool
copied_as_is(const char *cmd_name, const char *k)
{
    static const char *const command_fields[] = {
        /* find */ "filter", "sort", "projection", "skip", "limit", "batchSize", "singleBatch",
        "ntoreturn", "oplogReplay", "readOnce",
        /* count */ "query", "fields",
        /* distinct */ "key",
        /* aggregate */ "pipeline", "cursor",
        /* all */ "collation", NULL};
    if (strcmp(k, cmd_name) == 0) {
        return false;
    }
    for (size_t i = 0; command_fields[i] != NULL; i++) {
        if (strcmp(k, command_fields[i]) == 0) {
            return false;
        }
    }
    return true;
}

static void
append_stage_doc(bson_t *arr, uint32_t *n, const char *stage, const bson_iter_t *value)
{
    char k[16];
    const char *kp;
    bson_t d;
    bson_uint32_to_string((*n)++, &kp, k, sizeof(k));
    BSON_APPEND_DOCUMENT_BEGIN(arr, kp, &d);
    bson_append_iter(&d, stage, -1, value);
    bson_append_document_end(arr, &d);
}

/* The stages a find / count / distinct adds after the view's. */
static int
command_stages(const char *cmd_name, const bson_t *cmd, bson_t *arr, uint32_t *n, bson_t *cursor,
               shl_status_t *st)
{
    int ret = 0;
    bson_iter_t it;
    bool count = strcmp(cmd_name, "count") == 0, distinct = strcmp(cmd_name, "distinct") == 0;
    const char *filter = strcmp(cmd_name, "find") == 0 ? "filter" : "query";

    if (strcmp(cmd_name, "aggregate") == 0) {
        shl_view_append_stages(cmd, "pipeline", arr, n);
        if (bson_iter_init_find(&it, cmd, "cursor") && BSON_ITER_HOLDS_DOCUMENT(&it)) {
            const uint8_t *data;
            uint32_t len;
            bson_t c;
            bson_iter_document(&it, &len, &data);
            bson_init_static(&c, data, len);
            bson_concat(cursor, &c);
        }
        goto done;
    }
    if (bson_iter_init_find(&it, cmd, filter) && BSON_ITER_HOLDS_DOCUMENT(&it)) {
        append_stage_doc(arr, n, "$match", &it);
    }
    if (strcmp(cmd_name, "find") == 0) {
        for (size_t i = 0; find_refused[i] != NULL; i++) {
            if (bson_iter_init_find(&it, cmd, find_refused[i]) &&
                (!BSON_ITER_HOLDS_BOOL(&it) || bson_iter_bool(&it))) {
                SHL_FAIL(st, SHL_CODE_INVALID_PIPELINE_OPERATOR,
                         "Option %s not supported in aggregation.", find_refused[i]);
            }
        }
        if (bson_iter_init_find(&it, cmd, "sort") && BSON_ITER_HOLDS_DOCUMENT(&it)) {
            bson_iter_t sub;
            bson_iter_recurse(&it, &sub);
            if (shl_iter_next(&sub)) {
                append_stage_doc(arr, n, "$sort", &it);
            }
        }
    }
    if (bson_iter_init_find(&it, cmd, "skip") && bson_iter_as_int64(&it) > 0) {
        append_stage_doc(arr, n, "$skip", &it);
    }
    if (bson_iter_init_find(&it, cmd, "limit") && bson_iter_as_int64(&it) != 0) {
        if (bson_iter_as_int64(&it) < 0) {
            bson_value_t v = {.value_type = BSON_TYPE_INT64};
            char k[16];
            const char *kp;
            bson_t d;
            v.value.v_int64 = -bson_iter_as_int64(&it);
            bson_uint32_to_string((*n)++, &kp, k, sizeof(k));
            BSON_APPEND_DOCUMENT_BEGIN(arr, kp, &d);
            BSON_APPEND_VALUE(&d, "$limit", &v);
            bson_append_document_end(arr, &d);
        } else {
            append_stage_doc(arr, n, "$limit", &it);
        }
    }
    if (strcmp(cmd_name, "find") == 0) {
        if (bson_iter_init_find(&it, cmd, "projection") && BSON_ITER_HOLDS_DOCUMENT(&it)) {
            bson_iter_t sub;
            bson_iter_recurse(&it, &sub);
            if (shl_iter_next(&sub)) {
                append_stage_doc(arr, n, "$project", &it);
            }
        }
        if (bson_iter_init_find(&it, cmd, "batchSize")) {
            bson_append_iter(cursor, "batchSize", -1, &it);
        }
    } else if (count) {
        char k[16];
        const char *kp;
        bson_t d;
        bson_uint32_to_string((*n)++, &kp, k, sizeof(k));
        BSON_APPEND_DOCUMENT_BEGIN(arr, kp, &d);
        BSON_APPEND_UTF8(&d, "$count", "count");
        bson_append_document_end(arr, &d);
    } else if (distinct) {
        const char *key = NULL;
        bool found = false;
        char path[1024], k[16];
        const char *kp;
        bson_t d, u, g, acc;
        found = bson_iter_init_find(&it, cmd, "key");
        if (found && !BSON_ITER_HOLDS_UTF8(&it)) {
            SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH,
                     "BSON field 'distinct.key' is the wrong type '%s', expected type 'string'",
                     shl_bson_type_name(shl_iter_type(&it)));
        }
        key = found ? bson_iter_utf8(&it, NULL) : NULL;
        if (!found) {
            SHL_FAIL(st, SHL_CODE_IDL_FAILED_TO_PARSE,
                     "BSON field 'distinct.key' is missing but a required field");
        }
        snprintf(path, sizeof(path), "$%s", key);
        /* distinct looks into arrays: unwind each level of the path (as MongoDB's rewrite). */
        for (const char *p = key;; p++) {
            if (*p == '.' || *p == '\0') {
                char prefix[1024];
                snprintf(prefix, sizeof(prefix), "$%.*s", (int)(p - key), key);
                bson_uint32_to_string((*n)++, &kp, k, sizeof(k));
                BSON_APPEND_DOCUMENT_BEGIN(arr, kp, &d);
                BSON_APPEND_DOCUMENT_BEGIN(&d, "$unwind", &u);
                BSON_APPEND_UTF8(&u, "path", prefix);
                BSON_APPEND_BOOL(&u, "preserveNullAndEmptyArrays", true);
                bson_append_document_end(&d, &u);
                bson_append_document_end(arr, &d);
            }
            if (*p == '\0') {
                break;
            }
        }
        /* Present values only (null included), one group per value equal under the
         * collation ($group keys are collated), all in the first batch. */
        bson_uint32_to_string((*n)++, &kp, k, sizeof(k));
        BSON_APPEND_DOCUMENT_BEGIN(arr, kp, &d);
        BSON_APPEND_DOCUMENT_BEGIN(&d, "$match", &g);
        BSON_APPEND_DOCUMENT_BEGIN(&g, key, &acc);
        BSON_APPEND_BOOL(&acc, "$exists", true);
        bson_append_document_end(&g, &acc);
        bson_append_document_end(&d, &g);
        bson_append_document_end(arr, &d);
        bson_uint32_to_string((*n)++, &kp, k, sizeof(k));
        BSON_APPEND_DOCUMENT_BEGIN(arr, kp, &d);
        BSON_APPEND_DOCUMENT_BEGIN(&d, "$group", &g);
        BSON_APPEND_UTF8(&g, "_id", path);
        bson_append_document_end(&d, &g);
        bson_append_document_end(arr, &d);
        BSON_APPEND_INT32(cursor, "batchSize", INT32_MAX);
    }
done:
    return ret;
}

int
shl_view_aggregate_cmd(const bson_t *cmd, const char *coll, const bson_t *pipeline,
                       const bson_t *collation, bson_t *out, shl_status_t *st)
{
    int ret = 0;
    bson_iter_t it;
    const char *cmd_name;
    bson_t arr, cursor = BSON_INITIALIZER;
    uint32_t n = 0;
    shl_collator_t *user = NULL, *view = NULL;
    bool has_user = false;

    bson_init(out);
    bson_iter_init(&it, cmd);
    shl_iter_next(&it);
    cmd_name = bson_iter_key(&it);
    if (bson_iter_init_find(&it, cmd, "collation")) {
        has_user = true;
        SHL_ERR(shl_collator_from_iter(&it, "collation", &user, st));
    }
    if (collation != NULL) {
        SHL_ERR(shl_collator_new(collation, &view, st));
    }
    if (has_user && !shl_collator_equal(user, view)) {
        SHL_FAIL(st, SHL_CODE_OPTION_NOT_SUPPORTED_ON_VIEW,
                 "Cannot override a view's default collation");
    }
    BSON_APPEND_UTF8(out, "aggregate", coll);
    BSON_APPEND_ARRAY_BEGIN(out, "pipeline", &arr);
    {
        bson_t holder = BSON_INITIALIZER;
        BSON_APPEND_ARRAY(&holder, "pipeline", pipeline);
        shl_view_append_stages(&holder, "pipeline", &arr, &n);
        bson_destroy(&holder);
    }
    ret = command_stages(cmd_name, cmd, &arr, &n, &cursor, st);
    bson_append_array_end(out, &arr);
    SHL_ERR(ret);
    if (!bson_has_field(cmd, "explain") || strcmp(cmd_name, "aggregate") != 0 ||
        bson_has_field(cmd, "cursor")) {
        BSON_APPEND_DOCUMENT(out, "cursor", &cursor);
    }
    if (view != NULL) {
        shl_collator_append_spec(out, "collation", view);
    } else {
        bson_t simple;
        BSON_APPEND_DOCUMENT_BEGIN(out, "collation", &simple);
        BSON_APPEND_UTF8(&simple, "locale", "simple");
        bson_append_document_end(out, &simple);
    }
    bson_iter_init(&it, cmd);
    while (shl_iter_next(&it)) {
        if (copied_as_is(cmd_name, bson_iter_key(&it))) {
            bson_append_iter(out, NULL, 0, &it);
        }
    }
done:
    bson_destroy(&cursor);
    shl_collator_release(user);
    shl_collator_release(view);
    return ret;
}

int
shl_view_reply(const char *cmd_name, const bson_t *agg_reply, bson_t *reply, shl_status_t *st)
{
    bson_iter_t it;
    bool found;

    (void)st;
    if (strcmp(cmd_name, "count") == 0) {
        int64_t count = 0;
        found = bson_iter_init(&it, agg_reply) &&
                bson_iter_find_descendant(&it, "cursor.firstBatch.0.count", &it);
        if (found) {
            count = bson_iter_as_int64(&it);
        }
        if (count <= INT32_MAX) {
            BSON_APPEND_INT32(reply, "n", (int32_t)count);
        } else {
            BSON_APPEND_INT64(reply, "n", count);
        }
    } else if (strcmp(cmd_name, "distinct") == 0) {
        bson_t values;
        uint32_t n = 0;
        BSON_APPEND_ARRAY_BEGIN(reply, "values", &values);
        if (bson_iter_init(&it, agg_reply) &&
            bson_iter_find_descendant(&it, "cursor.firstBatch", &it) &&
            BSON_ITER_HOLDS_ARRAY(&it) && bson_iter_recurse(&it, &it)) {
            while (shl_iter_next(&it)) {
                bson_iter_t id;
                if (BSON_ITER_HOLDS_DOCUMENT(&it) && bson_iter_recurse(&it, &id) &&
                    bson_iter_find(&id, "_id")) {
                    char k[16];
                    const char *kp;
                    bson_uint32_to_string(n++, &kp, k, sizeof(k));
                    bson_append_iter(&values, kp, -1, &id);
                }
            }
        }
        bson_append_array_end(reply, &values);
    } else {
        bson_concat(reply, agg_reply);
    }
    return 0;
}
