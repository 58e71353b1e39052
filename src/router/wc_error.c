/*
 * wc_error.c -- merging the shards' write concern errors (wc_error.h).
 */
#include "router/wc_error.h"

#include <stdio.h>
#include <string.h>

#include "base/status.h"
#include "bson/bson_util.h"

void
router_wce_init(router_wce_list_t *l)
{
    memset(l, 0, sizeof(*l));
}

void
router_wce_cleanup(router_wce_list_t *l)
{
    for (size_t i = 0; i < l->n; i++) {
        bson_free(l->texts[i]);
    }
    bson_free(l->texts);
    memset(l, 0, sizeof(*l));
}

bool
router_wce_note(router_wce_list_t *l, const char *shard, const bson_t *reply)
{
    bson_iter_t it, f;
    bson_t wce, info;
    int code = SHL_CODE_WRITE_CONCERN_TIMEOUT;
    const char *msg = "";
    char *details = NULL;

    if (!bson_iter_init_find(&it, reply, "writeConcernError") || !BSON_ITER_HOLDS_DOCUMENT(&it) ||
        !shl_bson_get_subdoc(reply, "writeConcernError", &wce)) {
        return false;
    }
    if (bson_iter_init_find(&f, &wce, "code") && BSON_ITER_HOLDS_NUMBER(&f)) {
        code = (int)bson_iter_as_int64(&f);
    }
    if (bson_iter_init_find(&f, &wce, "errmsg") && BSON_ITER_HOLDS_UTF8(&f)) {
        msg = bson_iter_utf8(&f, NULL);
    }
    if (shl_bson_get_subdoc(&wce, "errInfo", &info)) {
        details = shl_bson_to_string(&info);
    }
    if (l->n == l->cap) {
        l->cap = l->cap != 0 ? l->cap * 2 : 4;
        l->texts = bson_realloc(l->texts, l->cap * sizeof(*l->texts));
    }
    if (l->n == 0) {
        l->first_code = code;
    }
    l->texts[l->n++] = bson_strdup_printf("%s: %s; Error details: %s at %s", shl_code_name(code),
                                          msg, details != NULL ? details : "<none>", shard);
    bson_free(details);
    return true;
}

bool
router_wce_any(const router_wce_list_t *l)
{
    return l->n > 0;
}

void
router_wce_append(const router_wce_list_t *l, bson_t *out)
{
    bson_t d;
    bson_string_t *msg;
    int code;

    if (l->n == 0) {
        return;
    }
    code = l->n == 1 ? l->first_code : SHL_CODE_WRITE_CONCERN_TIMEOUT;
    msg = bson_string_new(l->n == 1 ? "" : "Multiple errors reported :: ");
    for (size_t i = 0; i < l->n; i++) {
        if (i > 0) {
            bson_string_append(msg, " :: and :: ");
        }
        bson_string_append(msg, l->texts[i]);
    }
    BSON_APPEND_DOCUMENT_BEGIN(out, "writeConcernError", &d);
    BSON_APPEND_INT32(&d, "code", code);
    BSON_APPEND_UTF8(&d, "codeName", shl_code_name(code));
    BSON_APPEND_UTF8(&d, "errmsg", msg->str);
    bson_append_document_end(out, &d);
    bson_string_free(msg, true);
}
