/*
 * cli.c -- see cli.h.
 */
#include "main/cli.h"

#include <string.h>

#include "base/options.h"

static int
set_parameter(const char *kv, bson_t *params, shl_status_t *st)
{
    int ret = 0;
    const char *eq = strchr(kv, '=');
    char name[128];
    int id;

    if (eq == NULL || eq == kv || (size_t)(eq - kv) >= sizeof(name)) {
        SHL_FAIL(st, SHL_CODE_BAD_VALUE, "--setParameter expects name=value, got '%s'", kv);
    }
    memcpy(name, kv, (size_t)(eq - kv));
    name[eq - kv] = '\0';
    id = shl_opt_find(name);
    if (id < 0 || !(shl_opt_flags((shl_opt_id_t)id) & SHL_OPT_STARTUP)) {
        SHL_FAIL(st, SHL_CODE_BAD_VALUE, "Unknown --setParameter '%s'", name);
    }
    SHL_ERR(shl_opt_set_string((shl_opt_id_t)id, eq + 1, st));
    BSON_APPEND_UTF8(params, name, eq + 1);
done:
    return ret;
}

int
shl_cli_parse(int argc, char **argv, int first, bson_t **argv_out, bson_t **parsed_out,
              shl_status_t *st)
{
    int ret = 0;
    bson_t *av = bson_new(), *parsed = bson_new(), params = BSON_INITIALIZER;
    char key[16];
    const char *k;

    for (int i = 0; i < argc; i++) {
        bson_uint32_to_string((uint32_t)i, &k, key, sizeof(key));
        bson_append_utf8(av, k, -1, argv[i], -1);
    }
    for (int i = first; i < argc; i++) {
        const char *arg = argv[i], *val = NULL;
        char name[128];
        int id;

        if (strncmp(arg, "--", 2) != 0) {
            SHL_FAIL(st, SHL_CODE_BAD_VALUE, "unexpected argument '%s'", arg);
        }
        arg += 2;
        const char *eq = strchr(arg, '=');
        size_t nlen = eq != NULL ? (size_t)(eq - arg) : strlen(arg);
        if (nlen >= sizeof(name)) {
            SHL_FAIL(st, SHL_CODE_BAD_VALUE, "option name too long");
        }
        memcpy(name, arg, nlen);
        name[nlen] = '\0';
        if (eq != NULL) {
            val = eq + 1;
        }
        if (strcmp(name, "setParameter") == 0) {
            if (val == NULL && i + 1 < argc) {
                val = argv[++i];
            }
            if (val == NULL) {
                SHL_FAIL(st, SHL_CODE_BAD_VALUE, "--setParameter needs name=value");
            }
            SHL_ERR(set_parameter(val, &params, st));
            continue;
        }
        id = shl_opt_find(name);
        if (id < 0 || !(shl_opt_flags((shl_opt_id_t)id) & SHL_OPT_CMDLINE)) {
            SHL_FAIL(st, SHL_CODE_BAD_VALUE, "unrecognised option '--%s'", name);
        }
        if (val == NULL) {
            bson_t probe = BSON_INITIALIZER;
            bson_iter_t it;
            shl_opt_append((shl_opt_id_t)id, &probe);
            bool is_bool = bson_iter_init(&it, &probe) && bson_iter_next(&it) &&
                           BSON_ITER_HOLDS_BOOL(&it);
            bson_destroy(&probe);
            if (is_bool) {
                val = "true";
            } else if (i + 1 < argc) {
                val = argv[++i];
            } else {
                SHL_FAIL(st, SHL_CODE_BAD_VALUE, "option '--%s' needs a value", name);
            }
        }
        SHL_ERR(shl_opt_set_string((shl_opt_id_t)id, val, st));
        shl_opt_append((shl_opt_id_t)id, parsed);
    }
    if (!bson_empty(&params)) {
        BSON_APPEND_DOCUMENT(parsed, "setParameter", &params);
    }
done:
    bson_destroy(&params);
    *argv_out = av;
    *parsed_out = parsed;
    return ret;
}
