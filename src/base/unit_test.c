/*
 * unit_test.c -- runner for the unit tests registered with SHL_TEST (unit_test.h).
 */
#include "base/unit_test.h"

#include <stdarg.h>
#include <stdlib.h>

#define MAX_TESTS 4096

typedef struct test_case {
    const char *name;
    shl_test_fn fn;
} test_case_t;

static test_case_t tests[MAX_TESTS];
static int ntests;
static bool current_failed;

void
shl_test_register(const char *name, shl_test_fn fn)
{
    if (ntests < MAX_TESTS) {
        tests[ntests].name = name;
        tests[ntests].fn = fn;
        ntests++;
    }
}

void
shl_test_fail_here(const char *file, int line, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "  %s:%d: ", file, line);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n");
    current_failed = true;
}

static char *
quote_json(const char *json)
{
    char *s = bson_strdup(json);
    for (char *p = s; *p; p++) {
        if (*p == '\'') {
            *p = '"';
        }
    }
    return s;
}

bson_t *
shl_test_bson(const char *json)
{
    bson_error_t err;
    char *q = quote_json(json);
    bson_t *b = bson_new_from_json((const uint8_t *)q, -1, &err);
    if (b == NULL) {
        fprintf(stderr, "bad test JSON: %s: %s\n", q, err.message);
        abort();
    }
    bson_free(q);
    return b;
}

bool
shl_test_bson_eq(const bson_t *doc, const char *json, char **doc_json, char **want_json)
{
    bson_t *want = shl_test_bson(json);
    bool eq;
    *doc_json = bson_as_canonical_extended_json(doc, NULL);
    *want_json = bson_as_canonical_extended_json(want, NULL);
    eq = strcmp(*doc_json, *want_json) == 0;
    bson_destroy(want);
    return eq;
}

static bool
selected(const char *name, int argc, char **argv)
{
    bool sel = argc <= 1;
    for (int i = 1; i < argc && !sel; i++) {
        sel = strstr(name, argv[i]) != NULL;
    }
    return sel;
}

int
main(int argc, char **argv)
{
    int passed = 0, failed = 0;

    for (int i = 0; i < ntests; i++) {
        if (!selected(tests[i].name, argc, argv)) {
            continue;
        }
        current_failed = false;
        tests[i].fn();
        if (current_failed) {
            fprintf(stderr, "FAIL %s\n", tests[i].name);
            failed++;
        } else {
            passed++;
        }
    }
    printf("%d passed, %d failed\n", passed, failed);
    return failed == 0 ? 0 : 1;
}
