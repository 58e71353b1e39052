/*
 * fuzz_walk.c -- reads every value of a document the way commands will (see
 * fuzz_walk.h), so a document that passes the server's validation but breaks a
 * reader shows up as a crash or a sanitizer report.
 */
#include "fuzz_walk.h"

#include <string.h>

/* MongoDB's BSONDepth::kDefaultMaxAllowableDepth: levels below the top document. */
#define MAX_DEPTH 200

static volatile size_t sink;

static bool walk_iter(bson_iter_t *it, int depth);

/* A nested document or array: its bytes must form a document of their own. */
static bool
walk_child(const bson_iter_t *it, int depth)
{
    bson_iter_t child;
    const uint8_t *data = NULL;
    uint32_t len = 0;
    bson_t view;

    if (BSON_ITER_HOLDS_DOCUMENT(it)) {
        bson_iter_document(it, &len, &data);
    } else {
        bson_iter_array(it, &len, &data);
    }
    return data != NULL && bson_init_static(&view, data, len) && bson_iter_recurse(it, &child) &&
           walk_iter(&child, depth + 1);
}

static bool
walk_value(bson_iter_t *it, int depth)
{
    uint32_t len = 0;
    const uint8_t *data = NULL;
    const char *s;

    switch (bson_iter_type(it)) {
    case BSON_TYPE_DOUBLE:
        sink += (size_t)bson_iter_as_int64(it);
        break;
    case BSON_TYPE_UTF8:
        s = bson_iter_utf8(it, &len);
        sink += len > 0 ? (size_t)(unsigned char)s[len - 1] : 0;
        sink += strlen(s);
        break;
    case BSON_TYPE_DOCUMENT:
    case BSON_TYPE_ARRAY:
        return walk_child(it, depth);
    case BSON_TYPE_BINARY: {
        bson_subtype_t sub;
        bson_iter_binary(it, &sub, &len, &data);
        sink += len > 0 ? data[len - 1] : sub;
        break;
    }
    case BSON_TYPE_OID:
        sink += bson_iter_oid(it)->bytes[11];
        break;
    case BSON_TYPE_BOOL:
        sink += bson_iter_bool(it);
        break;
    case BSON_TYPE_DATE_TIME:
        sink += (size_t)bson_iter_date_time(it);
        break;
    case BSON_TYPE_REGEX: {
        const char *opts = NULL;
        s = bson_iter_regex(it, &opts);
        sink += strlen(s) + strlen(opts);
        break;
    }
    case BSON_TYPE_DBPOINTER: {
        const bson_oid_t *oid = NULL;
        bson_iter_dbpointer(it, &len, &s, &oid);
        sink += strlen(s) + oid->bytes[0];
        break;
    }
    case BSON_TYPE_CODE:
        s = bson_iter_code(it, &len);
        sink += strlen(s);
        break;
    case BSON_TYPE_SYMBOL:
        s = bson_iter_symbol(it, &len);
        sink += strlen(s);
        break;
    case BSON_TYPE_CODEWSCOPE: {
        bson_t scope;
        bson_iter_t child;
        uint32_t scope_len = 0;
        s = bson_iter_codewscope(it, &len, &scope_len, &data);
        /* The code is a string: NUL-terminated where its length says. */
        if (s[len] != '\0') {
            return false;
        }
        sink += strlen(s);
        /* MongoDB counts code with scope as two levels. */
        return bson_init_static(&scope, data, scope_len) && bson_iter_init(&child, &scope) &&
               walk_iter(&child, depth + 1);
    }
    case BSON_TYPE_INT32:
        sink += (size_t)bson_iter_int32(it);
        break;
    case BSON_TYPE_TIMESTAMP: {
        uint32_t t, i;
        bson_iter_timestamp(it, &t, &i);
        sink += t + i;
        break;
    }
    case BSON_TYPE_INT64:
        sink += (size_t)bson_iter_int64(it);
        break;
    case BSON_TYPE_DECIMAL128: {
        bson_decimal128_t d;
        char str[BSON_DECIMAL128_STRING];
        bson_iter_decimal128(it, &d);
        bson_decimal128_to_string(&d, str);
        sink += strlen(str);
        break;
    }
    default:
        /* EOD, undefined, null, minKey, maxKey: no payload. */
        sink += bson_iter_as_bool(it);
        break;
    }
    return true;
}

/* Every element up to the end; false if one is unreadable or the end is not clean. */
static bool
walk_iter(bson_iter_t *it, int depth)
{
    if (depth > MAX_DEPTH) {
        return false;
    }
    while (bson_iter_next(it)) {
        sink += strlen(bson_iter_key(it));
        if (!walk_value(it, depth)) {
            return false;
        }
    }
    /* bson_iter_next leaves err_off set when it stopped at corruption, not at the end. */
    return it->err_off == 0;
}

bool
fuzz_walk_doc(const bson_t *doc)
{
    bson_iter_t it;
    char *json;

    if (!bson_iter_init(&it, doc) || !walk_iter(&it, 0)) {
        return false;
    }
    /* Commands look up fields by name and by dotted path. */
    if (bson_iter_init(&it, doc)) {
        bson_iter_t desc;
        sink += bson_iter_find_descendant(&it, "a.b.0", &desc);
    }
    /* Logs and error messages render documents as JSON. */
    json = bson_as_relaxed_extended_json(doc, NULL);
    if (json != NULL) {
        sink += strlen(json);
        bson_free(json);
    }
    return true;
}
