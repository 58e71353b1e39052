/*
 * status.c -- the error-code table (generated from error_codes.def), statuses and
 * the one function that turns a status into a reply. STYLE.md "Errors".
 */
#include "base/status.h"
#include "base/utf8.h"

#include <execinfo.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct code_entry {
    int code;
    const char *name;
    uint32_t cats;
} code_entry_t;

static const code_entry_t codes[] = {
#define X(e, n, s, c) {n, s, c},
#include "base/error_codes.def"
#undef X
};

static const char *const label_names[] = {
#define X(e, s) s,
    SHL_LABELS(X)
#undef X
};

/* The table is sorted by number (error_codes.def keeps that order): binary search. */
static const code_entry_t *
find_code(int code)
{
    size_t lo = 0, hi = sizeof(codes) / sizeof(codes[0]);
    const code_entry_t *found = NULL;

    while (lo < hi && found == NULL) {
        size_t mid = lo + (hi - lo) / 2;
        if (codes[mid].code == code) {
            found = &codes[mid];
        } else if (codes[mid].code < code) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    return found;
}

/*
 * A reason becomes an errmsg string that drivers decode as UTF-8 (pymongo refuses the
 * whole reply otherwise), but it may echo a client's field name or value, which need
 * not be UTF-8, and truncation may cut a character: repair it in place. Reasons are
 * almost always ASCII, so the copy happens only when a byte has its high bit set.
 */
static void
make_valid_utf8(char *reason, size_t cap)
{
    char copy[SHL_STATUS_REASON_MAX];
    size_t n = strlen(reason);

    for (size_t i = 0; i < n; i++) {
        if ((unsigned char)reason[i] >= 0x80) {
            if (!shl_utf8_is_valid(reason + i, n - i)) {
                memcpy(copy, reason, n + 1);
                shl_utf8_copy_valid(reason, cap, copy, n);
            }
            break;
        }
    }
}

int
shl_status_set(shl_status_t *st, int code, const char *fmt, ...)
{
    va_list ap;

    if (st != NULL) {
        st->code = code;
        st->labels = 0;
        st->extra_len = 0;
        va_start(ap, fmt);
        vsnprintf(st->reason, sizeof(st->reason), fmt, ap);
        va_end(ap);
        make_valid_utf8(st->reason, sizeof(st->reason));
    }
    return code;
}

void
shl_status_clear(shl_status_t *st)
{
    st->code = 0;
    st->labels = 0;
    st->extra_len = 0;
    st->reason[0] = '\0';
}

/* extra_len of a status whose extra is the thread's large one (its generation in extra). */
#define EXTRA_LARGE UINT32_MAX

/* The thread's newest extra too large for a status (MongoDB's WouldChangeOwningShard images
 * can be megabytes): one per thread, replaced by the next. */
static _Thread_local bson_t *tl_large;
static _Thread_local uint64_t tl_large_gen;

void
shl_status_set_extra(shl_status_t *st, const bson_t *extra)
{
    if (extra == NULL) {
        st->extra_len = 0;
    } else if (extra->len > SHL_STATUS_EXTRA_MAX) {
        if (tl_large != NULL) {
            bson_destroy(tl_large);
        }
        tl_large = bson_copy(extra);
        tl_large_gen++;
        memcpy(st->extra, &tl_large_gen, sizeof(tl_large_gen));
        st->extra_len = EXTRA_LARGE;
    } else {
        memcpy(st->extra, bson_get_data(extra), extra->len);
        st->extra_len = extra->len;
    }
}

bool
shl_status_extra_get(const shl_status_t *st, bson_t *view)
{
    uint64_t gen;

    if (st->extra_len == EXTRA_LARGE) {
        memcpy(&gen, st->extra, sizeof(gen));
        return tl_large != NULL && gen == tl_large_gen &&
               bson_init_static(view, bson_get_data(tl_large), tl_large->len);
    }
    return st->extra_len > 0 && bson_init_static(view, st->extra, st->extra_len);
}

void
shl_status_add_label(shl_status_t *st, uint32_t label)
{
    st->labels |= label;
}

void
shl_status_label_change_stream(shl_status_t *st)
{
    if (shl_code_in_category(st->code, SHL_CAT_NON_RESUMABLE_CHANGE_STREAM_ERROR)) {
        st->labels |= SHL_LABEL(NON_RESUMABLE_CHANGE_STREAM_ERROR);
    } else if (shl_code_in_category(st->code, SHL_CAT_NETWORK_ERROR | SHL_CAT_SHUTDOWN_ERROR |
                                                  SHL_CAT_NOT_PRIMARY_ERROR |
                                                  SHL_CAT_STALE_SHARD_VERSION_ERROR) ||
               st->code == SHL_CODE_NETWORK_TIMEOUT || st->code == SHL_CODE_EXCEEDED_TIME_LIMIT ||
               st->code == SHL_CODE_RETRY_CHANGE_STREAM ||
               st->code == SHL_CODE_FAILED_TO_SATISFY_READ_PREFERENCE) {
        st->labels |= SHL_LABEL(RESUMABLE_CHANGE_STREAM_ERROR);
    }
}

const char *
shl_code_name(int code)
{
    /* Codes outside the catalogue are MongoDB's numbered assertion sites: "Location<N>". */
    static _Thread_local char location[32];
    const code_entry_t *e = find_code(code);

    if (e == NULL) {
        snprintf(location, sizeof(location), "Location%d", code);
    }
    return e != NULL ? e->name : location;
}

int
shl_code_from_name(const char *name)
{
    int code = -1;
    for (size_t i = 0; i < sizeof(codes) / sizeof(codes[0]) && code < 0; i++) {
        if (strcmp(codes[i].name, name) == 0) {
            code = codes[i].code;
        }
    }
    return code;
}

bool
shl_code_in_category(int code, uint32_t cats)
{
    const code_entry_t *e = find_code(code);
    return e != NULL && (e->cats & cats) != 0;
}

const char *
shl_label_name(int bit)
{
    return bit >= 0 && bit < SHL_LABEL_COUNT ? label_names[bit] : "";
}

void
shl_status_append_reply(const shl_status_t *st, bson_t *reply)
{
    bson_t extra;
    bson_iter_t it;

    BSON_APPEND_DOUBLE(reply, "ok", 0.0);
    BSON_APPEND_UTF8(reply, "errmsg", st->reason);
    BSON_APPEND_INT32(reply, "code", st->code);
    BSON_APPEND_UTF8(reply, "codeName", shl_code_name(st->code));
    if (shl_status_extra_get(st, &extra) && bson_iter_init(&it, &extra)) {
        while (bson_iter_next(&it)) {
            bson_append_iter(reply, bson_iter_key(&it), -1, &it);
        }
    }
    if (st->labels != 0) {
        bson_t arr;
        char idx[16];
        const char *key;
        uint32_t n = 0;
        BSON_APPEND_ARRAY_BEGIN(reply, "errorLabels", &arr);
        for (int bit = 0; bit < SHL_LABEL_COUNT; bit++) {
            if (st->labels & (1u << bit)) {
                bson_uint32_to_string(n++, &key, idx, sizeof(idx));
                bson_append_utf8(&arr, key, -1, label_names[bit], -1);
            }
        }
        bson_append_array_end(reply, &arr);
    }
}

static bool
truthy(const bson_iter_t *it)
{
    return bson_iter_as_bool(it);
}

int
shl_status_from_reply(const bson_t *reply, shl_status_t *st)
{
    bson_iter_t it;
    int code = SHL_CODE_UNKNOWN_ERROR;
    const char *msg = "";
    bson_t extra = BSON_INITIALIZER;
    uint32_t labels = 0;
    bool ok = false;

    if (!bson_iter_init(&it, reply)) {
        bson_destroy(&extra);
        return shl_status_set(st, SHL_CODE_INVALID_BSON, "invalid reply document");
    }
    /* Most replies succeed: read only "ok" (the last one counts) before anything else. */
    while (bson_iter_next(&it)) {
        const char *key = bson_iter_key(&it);
        if (key[0] == 'o' && key[1] == 'k' && key[2] == '\0') {
            ok = truthy(&it);
        }
    }
    if (ok) {
        bson_destroy(&extra);
        return 0;
    }
    bson_iter_init(&it, reply);
    while (bson_iter_next(&it)) {
        const char *key = bson_iter_key(&it);
        if (strcmp(key, "ok") == 0) {
            ok = truthy(&it);
        } else if (strcmp(key, "code") == 0 && BSON_ITER_HOLDS_NUMBER(&it)) {
            code = (int)bson_iter_as_int64(&it);
        } else if (strcmp(key, "errmsg") == 0 && BSON_ITER_HOLDS_UTF8(&it)) {
            msg = bson_iter_utf8(&it, NULL);
        } else if (strcmp(key, "errorLabels") == 0 && BSON_ITER_HOLDS_ARRAY(&it)) {
            bson_iter_t child;
            if (bson_iter_recurse(&it, &child)) {
                while (bson_iter_next(&child)) {
                    for (int bit = 0; bit < SHL_LABEL_COUNT && BSON_ITER_HOLDS_UTF8(&child);
                         bit++) {
                        if (strcmp(bson_iter_utf8(&child, NULL), label_names[bit]) == 0) {
                            labels |= 1u << bit;
                        }
                    }
                }
            }
        } else if (strcmp(key, "codeName") != 0 && key[0] != '$' &&
                   strcmp(key, "operationTime") != 0) {
            bson_append_iter(&extra, key, -1, &it);
        }
    }
    if (ok) {
        bson_destroy(&extra);
        return 0;
    }
    shl_status_set(st, code, "%s", msg);
    shl_status_set_extra(st, &extra);
    st->labels = labels;
    bson_destroy(&extra);
    return code;
}

void
shl_invariant_failed(const char *expr, const char *file, int line, const char *func)
{
    void *frames[64];
    int n;

    fprintf(stderr, "Invariant failure: %s at %s:%d in %s\n", expr, file, line, func);
    n = backtrace(frames, 64);
    backtrace_symbols_fd(frames, n, STDERR_FILENO);
    abort();
}

/* The status of an error document {code, errmsg, ...} ('what' when it has no errmsg). */
static int
status_from_error_doc(bson_iter_t *doc, const char *what, shl_status_t *st)
{
    bson_iter_t f;
    int code = SHL_CODE_INTERNAL_ERROR;
    const char *msg = what;

    if (bson_iter_recurse(doc, &f)) {
        while (bson_iter_next(&f)) {
            if (strcmp(bson_iter_key(&f), "code") == 0 && BSON_ITER_HOLDS_NUMBER(&f)) {
                code = (int)bson_iter_as_int64(&f);
            } else if (strcmp(bson_iter_key(&f), "errmsg") == 0 && BSON_ITER_HOLDS_UTF8(&f)) {
                msg = bson_iter_utf8(&f, NULL);
            }
        }
    }
    return shl_status_set(st, code, "%s", msg);
}

int
shl_status_from_write_errors(const bson_t *reply, shl_status_t *st)
{
    int ret = 0;
    bson_iter_t it, we;

    if (bson_iter_init_find(&it, reply, "writeErrors") && BSON_ITER_HOLDS_ARRAY(&it) &&
        bson_iter_recurse(&it, &we) && bson_iter_next(&we) && BSON_ITER_HOLDS_DOCUMENT(&we)) {
        ret = status_from_error_doc(&we, "write error", st);
    }
    return ret;
}

int
shl_status_from_write_concern_error(const bson_t *reply, shl_status_t *st)
{
    int ret = 0;
    bson_iter_t it;

    if (bson_iter_init_find(&it, reply, "writeConcernError") && BSON_ITER_HOLDS_DOCUMENT(&it)) {
        ret = status_from_error_doc(&it, "write concern error", st);
    }
    return ret;
}
