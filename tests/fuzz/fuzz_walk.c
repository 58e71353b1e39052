/*
 * fuzz_walk.c -- reads every value of a document the way commands will (see
 * fuzz_walk.h), so a document that passes the server's validation but breaks a
 * reader shows up as a crash or a sanitizer report.
 */
#include "fuzz_walk.h"

#include <stdlib.h>
#include <string.h>

#include "base/log.h"

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

/*
 * JSON syntax (RFC 8259), enough to tell whether a rendered log value is JSON: one
 * value at *p, whitespace allowed between tokens. 'depth' bounds the recursion (the
 * renderer stops nesting at 100 levels).
 */
static bool json_value_ok(const char **p, int depth);

static void
json_ws(const char **p)
{
    while (**p == ' ' || **p == '\t' || **p == '\n' || **p == '\r') {
        (*p)++;
    }
}

static bool
json_string_ok(const char **p)
{
    const char *s = *p;

    if (*s++ != '"') {
        return false;
    }
    while (*s != '"') {
        if ((unsigned char)*s < 0x20) {
            return false; /* control characters must be escaped; NUL: unterminated */
        }
        if (*s == '\\') {
            s++;
            if (*s == 'u') {
                for (int i = 1; i <= 4; i++) {
                    if (strchr("0123456789abcdefABCDEF", s[i]) == NULL || s[i] == '\0') {
                        return false;
                    }
                }
                s += 4;
            } else if (*s == '\0' || strchr("\"\\/bfnrt", *s) == NULL) {
                return false;
            }
        }
        s++;
    }
    *p = s + 1;
    return true;
}

static bool
json_number_ok(const char **p)
{
    const char *s = *p;

    if (*s == '-') {
        s++;
    }
    if (*s == '0') {
        s++;
    } else if (*s >= '1' && *s <= '9') {
        while (*s >= '0' && *s <= '9') {
            s++;
        }
    } else {
        return false;
    }
    if (*s == '.') {
        s++;
        if (!(*s >= '0' && *s <= '9')) {
            return false;
        }
        while (*s >= '0' && *s <= '9') {
            s++;
        }
    }
    if (*s == 'e' || *s == 'E') {
        s++;
        if (*s == '+' || *s == '-') {
            s++;
        }
        if (!(*s >= '0' && *s <= '9')) {
            return false;
        }
        while (*s >= '0' && *s <= '9') {
            s++;
        }
    }
    *p = s;
    return true;
}

static bool
json_container_ok(const char **p, int depth)
{
    char close = **p == '{' ? '}' : ']';
    bool object = close == '}';

    (*p)++;
    json_ws(p);
    if (**p == close) {
        (*p)++;
        return true;
    }
    for (;;) {
        if (object) {
            if (!json_string_ok(p)) {
                return false;
            }
            json_ws(p);
            if (*(*p)++ != ':') {
                return false;
            }
        }
        if (!json_value_ok(p, depth + 1)) {
            return false;
        }
        json_ws(p);
        if (**p == close) {
            (*p)++;
            return true;
        }
        if (*(*p)++ != ',') {
            return false;
        }
        json_ws(p);
    }
}

static bool
json_value_ok(const char **p, int depth)
{
    json_ws(p);
    if (depth > 128) {
        return false;
    }
    switch (**p) {
    case '{':
    case '[':
        return json_container_ok(p, depth);
    case '"':
        return json_string_ok(p);
    case 't':
        return strncmp(*p, "true", 4) == 0 && (*p += 4, true);
    case 'f':
        return strncmp(*p, "false", 5) == 0 && (*p += 5, true);
    case 'n':
        return strncmp(*p, "null", 4) == 0 && (*p += 4, true);
    default:
        return json_number_ok(p);
    }
}

/* A log line's rendering of 'doc' must be one JSON object in valid UTF-8. */
static void
check_log_json(const bson_t *doc)
{
    size_t len = 0;
    char *json = shl_log_json_from_bson(doc, false, &len);
    const char *p = json;

    if (strlen(json) != len || !bson_utf8_validate(json, len, false) || !json_value_ok(&p, 0)) {
        abort();
    }
    json_ws(&p);
    if (*p != '\0') {
        abort();
    }
    bson_free(json);
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
    /* Error messages render documents as JSON with libbson (NULL when a name or string
     * is not UTF-8), log lines with their own renderer, which must always give JSON. */
    json = bson_as_relaxed_extended_json(doc, NULL);
    if (json != NULL) {
        sink += strlen(json);
        bson_free(json);
    }
    check_log_json(doc);
    return true;
}

static uint32_t
rd_u32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* A C string in p[*off, end): moves *off past its NUL; false if there is none. */
static bool
skip_cstring(const uint8_t *p, size_t end, size_t *off)
{
    const uint8_t *nul = *off < end ? memchr(p + *off, '\0', end - *off) : NULL;

    if (nul == NULL) {
        return false;
    }
    *off = (size_t)(nul - p) + 1;
    return true;
}

/* A BSON string (int32 length counting its NUL, bytes, NUL) at p[off, end). */
static bool
string_ok(const uint8_t *p, size_t off, size_t end, size_t *len)
{
    uint32_t n;

    if (end - off < 4) {
        return false;
    }
    n = rd_u32(p + off);
    if (n == 0 || n > end - off - 4 || p[off + 4 + n - 1] != '\0') {
        return false;
    }
    *len = 4 + (size_t)n;
    return true;
}

/*
 * The document at p[start, start + its length); 'end' bounds where it may reach, 'depth'
 * is its level below the top. Each element's value must end before its document's last
 * byte, which is the EOO byte.
 */
static fuzz_bson_verdict_t
check_doc(const uint8_t *p, size_t start, size_t end, int depth, int max_depth)
{
    size_t doc_end, off = start + 4;
    uint32_t n;

    if (end - start < 5) {
        return FUZZ_BSON_INVALID;
    }
    n = rd_u32(p + start);
    if (n < 5 || n > end - start) {
        return FUZZ_BSON_INVALID;
    }
    doc_end = start + n;
    for (;;) {
        uint8_t type;
        size_t vlen = 0;
        fuzz_bson_verdict_t v;

        if (off >= doc_end) {
            return FUZZ_BSON_INVALID;
        }
        type = p[off++];
        if (type == 0) {
            return off == doc_end ? FUZZ_BSON_OK : FUZZ_BSON_INVALID;
        }
        if (!skip_cstring(p, doc_end, &off)) {
            return FUZZ_BSON_INVALID;
        }
        switch (type) {
        case 0x06: /* undefined */
        case 0x0A: /* null */
        case 0x7F: /* maxKey */
        case 0xFF: /* minKey */
            vlen = 0;
            break;
        case 0x08: /* bool: one byte, 0 or 1 */
            if (off < doc_end && p[off] > 1) {
                return FUZZ_BSON_INVALID;
            }
            vlen = 1;
            break;
        case 0x10: /* int32 */
            vlen = 4;
            break;
        case 0x01: /* double */
        case 0x09: /* date */
        case 0x11: /* timestamp */
        case 0x12: /* int64 */
            vlen = 8;
            break;
        case 0x07: /* ObjectId */
            vlen = 12;
            break;
        case 0x13: /* decimal128 */
            vlen = 16;
            break;
        case 0x02: /* string */
        case 0x0D: /* code */
        case 0x0E: /* symbol */
        case 0x0C: /* DBPointer: a string, then 12 bytes */
            if (!string_ok(p, off, doc_end, &vlen)) {
                return FUZZ_BSON_INVALID;
            }
            vlen += type == 0x0C ? 12 : 0;
            break;
        case 0x05: /* binary: int32 length, subtype, bytes */
            if (doc_end - off < 5) {
                return FUZZ_BSON_INVALID;
            }
            vlen = 5 + (size_t)rd_u32(p + off);
            if (p[off + 4] == 0x02 &&
                (vlen < 9 || vlen >= doc_end - off || (size_t)rd_u32(p + off + 5) + 9 != vlen)) {
                return FUZZ_BSON_INVALID;
            }
            break;
        case 0x0B: /* regex: pattern and options, two C strings */
            vlen = off;
            if (!skip_cstring(p, doc_end, &vlen) || !skip_cstring(p, doc_end, &vlen)) {
                return FUZZ_BSON_INVALID;
            }
            vlen -= off;
            break;
        case 0x03: /* document */
        case 0x04: /* array */
            if (doc_end - off < 4) {
                return FUZZ_BSON_INVALID;
            }
            vlen = rd_u32(p + off);
            if (vlen < 5 || vlen >= doc_end - off) {
                return FUZZ_BSON_INVALID;
            }
            if (depth + 1 > max_depth) {
                return FUZZ_BSON_TOO_DEEP;
            }
            if ((v = check_doc(p, off, off + vlen, depth + 1, max_depth)) != FUZZ_BSON_OK) {
                return v;
            }
            break;
        case 0x0F: { /* code with scope: int32 total, string, document; two levels */
            size_t clen;
            if (doc_end - off < 4) {
                return FUZZ_BSON_INVALID;
            }
            vlen = rd_u32(p + off);
            if (vlen < 14 || vlen >= doc_end - off) {
                return FUZZ_BSON_INVALID;
            }
            if (depth + 2 > max_depth) {
                return FUZZ_BSON_TOO_DEEP;
            }
            if (!string_ok(p, off + 4, off + vlen - 5, &clen) ||
                rd_u32(p + off + 4 + clen) != vlen - 4 - clen) {
                return FUZZ_BSON_INVALID;
            }
            v = check_doc(p, off + 4 + clen, off + vlen, depth + 2, max_depth);
            if (v != FUZZ_BSON_OK) {
                return v;
            }
            break;
        }
        default:
            return FUZZ_BSON_INVALID;
        }
        if (vlen >= doc_end - off) {
            return FUZZ_BSON_INVALID;
        }
        off += vlen;
    }
}

fuzz_bson_verdict_t
fuzz_bson_check(const uint8_t *data, size_t len, int max_depth)
{
    /* The top document must fill 'len' exactly. */
    if (len < 4 || rd_u32(data) != len) {
        return FUZZ_BSON_INVALID;
    }
    return check_doc(data, 0, len, 0, max_depth);
}
