/*
 * options.c -- typed storage for the options table. Integers, bools and doubles are
 * atomics; strings are swapped under a lock and old values are kept alive (they are
 * few and set rarely) so a pointer returned by shl_opt_str stays valid.
 */
#include "base/options.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* INT values are 32-bit like MongoDB's int parameters; LONG ones are 64-bit (NumberLong). */
typedef enum opt_type { T_BOOL, T_INT, T_LONG, T_DOUBLE, T_STRING } opt_type_t;

typedef struct opt_def {
    const char *name;
    opt_type_t type;
    const char *def;
    uint32_t flags;
    const char *help;
} opt_def_t;

static const opt_def_t defs[SHL_OPT_COUNT] = {
#define X(name, type, def, flags, help) {#name, T_##type, def, flags, help},
#include "base/options.def"
#undef X
};

static _Atomic int64_t ivals[SHL_OPT_COUNT];
static _Atomic double dvals[SHL_OPT_COUNT];
static _Atomic(char *) svals[SHL_OPT_COUNT];
static pthread_mutex_t str_lock = PTHREAD_MUTEX_INITIALIZER;
/* Replaced strings, kept reachable so leak checkers see them as live. Guarded by str_lock. */
static char **retired;
static size_t nretired;

void
shl_options_init(void)
{
    for (int i = 0; i < SHL_OPT_COUNT; i++) {
        shl_status_t st;
        int rc = shl_opt_set_string((shl_opt_id_t)i, defs[i].def, &st);
        SHL_INVARIANT(rc == 0);
    }
}

int64_t
shl_opt_int(shl_opt_id_t id)
{
    return atomic_load(&ivals[id]);
}

bool
shl_opt_bool(shl_opt_id_t id)
{
    return atomic_load(&ivals[id]) != 0;
}

double
shl_opt_double(shl_opt_id_t id)
{
    return atomic_load(&dvals[id]);
}

const char *
shl_opt_str(shl_opt_id_t id)
{
    const char *s = atomic_load(&svals[id]);
    return s != NULL ? s : "";
}

int
shl_opt_find(const char *name)
{
    int found = -1;
    for (int i = 0; i < SHL_OPT_COUNT && found < 0; i++) {
        if (strcmp(defs[i].name, name) == 0) {
            found = i;
        }
    }
    return found;
}

uint32_t
shl_opt_flags(shl_opt_id_t id)
{
    return defs[id].flags;
}

const char *
shl_opt_name(shl_opt_id_t id)
{
    return defs[id].name;
}

static void
set_str(shl_opt_id_t id, const char *value)
{
    /* Old strings stay allocated: readers may hold them (see file comment). */
    pthread_mutex_lock(&str_lock);
    char *old = atomic_exchange(&svals[id], bson_strdup(value));
    if (old != NULL) {
        retired = bson_realloc(retired, (nretired + 1) * sizeof(*retired));
        retired[nretired++] = old;
    }
    pthread_mutex_unlock(&str_lock);
}

int
shl_opt_set_string(shl_opt_id_t id, const char *value, shl_status_t *st)
{
    int ret = 0;
    char *end = NULL;

    switch (defs[id].type) {
    case T_BOOL:
        if (strcmp(value, "true") == 0 || strcmp(value, "1") == 0) {
            atomic_store(&ivals[id], 1);
        } else if (strcmp(value, "false") == 0 || strcmp(value, "0") == 0) {
            atomic_store(&ivals[id], 0);
        } else {
            SHL_FAIL(st, SHL_CODE_BAD_VALUE, "Invalid value for %s: '%s' (expected true/false)",
                     defs[id].name, value);
        }
        break;
    case T_INT:
    case T_LONG: {
        errno = 0;
        long long v = strtoll(value, &end, 10);
        if (errno != 0 || end == value || *end != '\0' ||
            (defs[id].type == T_INT && (v < INT32_MIN || v > INT32_MAX))) {
            SHL_FAIL(st, SHL_CODE_BAD_VALUE, "Invalid value for %s: '%s' (expected an integer)",
                     defs[id].name, value);
        }
        atomic_store(&ivals[id], (int64_t)v);
        break;
    }
    case T_DOUBLE: {
        errno = 0;
        double v = strtod(value, &end);
        if (errno != 0 || end == value || *end != '\0') {
            SHL_FAIL(st, SHL_CODE_BAD_VALUE, "Invalid value for %s: '%s' (expected a number)",
                     defs[id].name, value);
        }
        atomic_store(&dvals[id], v);
        break;
    }
    case T_STRING:
        set_str(id, value);
        break;
    }
done:
    return ret;
}

int
shl_opt_set_iter(shl_opt_id_t id, const bson_iter_t *value, shl_status_t *st)
{
    int ret = 0;

    switch (defs[id].type) {
    case T_BOOL:
        if (!BSON_ITER_HOLDS_BOOL(value) && !BSON_ITER_HOLDS_NUMBER(value)) {
            SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH, "%s must be a boolean", defs[id].name);
        }
        atomic_store(&ivals[id], bson_iter_as_bool(value) ? 1 : 0);
        break;
    case T_INT:
    case T_LONG:
        if (!BSON_ITER_HOLDS_NUMBER(value)) {
            SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH, "%s must be a number", defs[id].name);
        }
        if (defs[id].type == T_INT &&
            (bson_iter_as_int64(value) < INT32_MIN || bson_iter_as_int64(value) > INT32_MAX)) {
            SHL_FAIL(st, SHL_CODE_BAD_VALUE, "%s is out of range for a 32-bit integer",
                     defs[id].name);
        }
        atomic_store(&ivals[id], bson_iter_as_int64(value));
        break;
    case T_DOUBLE:
        if (!BSON_ITER_HOLDS_NUMBER(value)) {
            SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH, "%s must be a number", defs[id].name);
        }
        atomic_store(&dvals[id], bson_iter_as_double(value));
        break;
    case T_STRING:
        if (!BSON_ITER_HOLDS_UTF8(value)) {
            SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH, "%s must be a string", defs[id].name);
        }
        set_str(id, bson_iter_utf8(value, NULL));
        break;
    }
done:
    return ret;
}

void
shl_opt_append(shl_opt_id_t id, bson_t *doc)
{
    const char *name = defs[id].name;
    switch (defs[id].type) {
    case T_BOOL:
        BSON_APPEND_BOOL(doc, name, shl_opt_bool(id));
        break;
    case T_INT:
        BSON_APPEND_INT32(doc, name, (int32_t)shl_opt_int(id));
        break;
    case T_LONG:
        BSON_APPEND_INT64(doc, name, shl_opt_int(id));
        break;
    case T_DOUBLE:
        BSON_APPEND_DOUBLE(doc, name, shl_opt_double(id));
        break;
    case T_STRING:
        BSON_APPEND_UTF8(doc, name, shl_opt_str(id));
        break;
    }
}
