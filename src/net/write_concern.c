/*
 * write_concern.c -- see write_concern.h.
 */
#include "bson/bson_iter.h"
#include "net/write_concern.h"

#include <math.h>
#include <string.h>

int
shl_write_concern_parse(const bson_t *doc, shl_write_concern_t *wc, shl_status_t *st)
{
    int ret = 0;
    bson_iter_t it;

    memset(wc, 0, sizeof(*wc));
    wc->w = 1;
    /* An empty document is no write concern at all: the default applies (MongoDB). */
    wc->is_default = doc == NULL || bson_empty(doc);
    wc->provenance = wc->is_default ? "implicitDefault" : "clientSupplied";
    if (wc->is_default || !bson_iter_init(&it, doc)) {
        return 0;
    }
    while (shl_iter_next(&it)) {
        const char *k = shl_iter_key(&it);
        if (strcmp(k, "w") == 0) {
            if (BSON_ITER_HOLDS_NUMBER(&it)) {
                double d = bson_iter_as_double(&it);
                if (d < 0 || d > 50 || d != floor(d)) {
                    SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE,
                             "w has to be a non-negative number and not greater than 50; "
                             "found: %g",
                             d);
                }
                wc->w = (int32_t)d;
            } else if (BSON_ITER_HOLDS_UTF8(&it)) {
                const char *s = bson_iter_utf8(&it, NULL);
                if (strcmp(s, "majority") == 0) {
                    wc->w_majority = true;
                } else {
                    snprintf(wc->w_tag, sizeof(wc->w_tag), "%s", s);
                }
            } else {
                SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE, "w has to be a number or string");
            }
        } else if (strcmp(k, "j") == 0) {
            if (!BSON_ITER_HOLDS_BOOL(&it) && !BSON_ITER_HOLDS_NUMBER(&it)) {
                SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE, "j must be numeric or a boolean value");
            }
            wc->j = bson_iter_as_bool(&it);
            wc->has_j = true;
        } else if (strcmp(k, "wtimeout") == 0 || strcmp(k, "wtimeoutMS") == 0) {
            if (!BSON_ITER_HOLDS_NUMBER(&it)) {
                SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE, "wtimeout must be a number");
            }
            wc->wtimeout_ms = bson_iter_as_int64(&it);
        } else if (strcmp(k, "fsync") == 0) {
            /* Legacy: fsync means journaled. */
            if (bson_iter_as_bool(&it)) {
                wc->j = true;
                wc->has_j = true;
            }
        } else if (strcmp(k, "provenance") == 0) {
            static const char *const known[] = {"clientSupplied",       "implicitDefault",
                                                "customDefault",        "getLastErrorDefaults",
                                                "internalWriteDefault", NULL};
            size_t i = 0;
            if (!BSON_ITER_HOLDS_UTF8(&it)) {
                SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH,
                         "BSON field 'provenance' is the wrong type, expected type 'string'");
            }
            while (known[i] != NULL && strcmp(known[i], bson_iter_utf8(&it, NULL)) != 0) {
                i++;
            }
            if (known[i] == NULL) {
                SHL_FAIL(st, SHL_CODE_BAD_VALUE,
                         "Enumeration value '%s' for field 'provenance' is not a valid value.",
                         bson_iter_utf8(&it, NULL));
            }
            wc->provenance = known[i];
        } else if (strcmp(k, "getLastError") != 0) {
            SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE, "unrecognized write concern field: %s", k);
        }
    }
done:
    return ret;
}

bool
shl_write_concern_unacknowledged(const shl_write_concern_t *wc)
{
    return wc->w == 0 && !wc->w_majority && wc->w_tag[0] == '\0' && !wc->j;
}

bool
shl_write_concern_needs_journal(const shl_write_concern_t *wc)
{
    return wc->j || wc->w_majority;
}

void
shl_write_concern_append(const shl_write_concern_t *wc, bson_t *out, const char *key)
{
    bson_t doc;
    BSON_APPEND_DOCUMENT_BEGIN(out, key, &doc);
    if (wc->w_majority) {
        BSON_APPEND_UTF8(&doc, "w", "majority");
    } else if (wc->w_tag[0] != '\0') {
        BSON_APPEND_UTF8(&doc, "w", wc->w_tag);
    } else {
        BSON_APPEND_INT32(&doc, "w", wc->w);
    }
    if (wc->has_j) {
        BSON_APPEND_BOOL(&doc, "j", wc->j);
    }
    BSON_APPEND_INT32(&doc, "wtimeout", (int32_t)wc->wtimeout_ms);
    if (wc->provenance != NULL) {
        BSON_APPEND_UTF8(&doc, "provenance", wc->provenance);
    }
    bson_append_document_end(out, &doc);
}

void
shl_write_concern_set_default(shl_write_concern_t *wc, bool majority, const char *provenance)
{
    memset(wc, 0, sizeof(*wc));
    wc->w = 1;
    wc->w_majority = majority;
    wc->is_default = true;
    wc->provenance = provenance;
}
