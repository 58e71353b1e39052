/*
 * cli.c -- see cli.h.
 */
#include "bson/bson_iter.h"
#include "main/cli.h"

#include <string.h>

#include "base/failpoint.h"
#include "base/options.h"
#include "bson/bson_util.h"

/* Where MongoDB's getCmdLineOpts puts each flag in 'parsed' (its YAML config layout). */
typedef struct yaml_place {
    const char *opt;
    const char *section;
    const char *field;
} yaml_place_t;

static const yaml_place_t yaml_places[] = {
    {"port", "net", "port"},
    {"bind_ip", "net", "bindIp"},
    {"maxConns", "net", "maxIncomingConnections"},
    {"replSet", "replication", "replSet"},
    {"oplogSize", "replication", "oplogSizeMB"},
    {"configdb", "sharding", "configDB"},
    {"shardsvr", "sharding", "clusterRole"},
    {"configsvr", "sharding", "clusterRole"},
    {"dbpath", "storage", "dbPath"},
    {"logpath", "systemLog", "path"},
};

static const char *const yaml_sections[] = {"net",      "replication", "setParameter",
                                            "sharding", "storage",     "systemLog"};

/* Build getCmdLineOpts' 'parsed': flags given on the command line, nested by section. */
static void
build_parsed(bson_t *parsed, const bool *given, const bson_t *params)
{
    for (size_t s = 0; s < sizeof(yaml_sections) / sizeof(yaml_sections[0]); s++) {
        const char *sec = yaml_sections[s];
        bson_t doc;
        if (strcmp(sec, "setParameter") == 0) {
            if (!bson_empty(params)) {
                BSON_APPEND_DOCUMENT(parsed, sec, params);
            }
            continue;
        }
        bson_init(&doc);
        for (size_t i = 0; i < sizeof(yaml_places) / sizeof(yaml_places[0]); i++) {
            const yaml_place_t *y = &yaml_places[i];
            int id = shl_opt_find(y->opt);
            if (strcmp(y->section, sec) != 0 || id < 0 || !given[id]) {
                continue;
            }
            if (strcmp(y->field, "clusterRole") == 0) {
                if (shl_opt_bool((shl_opt_id_t)id)) {
                    BSON_APPEND_UTF8(&doc, y->field, y->opt);
                }
            } else {
                bson_t one = BSON_INITIALIZER;
                bson_iter_t it;
                shl_opt_append((shl_opt_id_t)id, &one);
                if (bson_iter_init(&it, &one) && shl_iter_next(&it)) {
                    bson_append_iter(&doc, y->field, -1, &it);
                }
                bson_destroy(&one);
                if (strcmp(y->field, "path") == 0) {
                    BSON_APPEND_UTF8(&doc, "destination", "file");
                }
            }
        }
        if (!bson_empty(&doc)) {
            BSON_APPEND_DOCUMENT(parsed, sec, &doc);
        }
        bson_destroy(&doc);
    }
}

/* --setParameter failpoint.NAME={mode: ..., data: ...} (MongoDB's; with enableTestCommands=1
 * given before it): the fail point is set before the process starts anything. */
static int
set_failpoint(const char *name, const char *json, shl_status_t *st)
{
    int ret = 0;
    shl_failpoint_t *fp = shl_failpoint_find(name);
    bson_t *spec = NULL, data;
    bson_error_t err;
    bson_iter_t mode;
    int64_t entered = 0;

    if (!shl_opt_bool(SHL_OPT_enableTestCommands)) {
        SHL_FAIL(st, SHL_CODE_BAD_VALUE,
                 "failpoint.%s needs enableTestCommands=1 (given before it)", name);
    }
    if (fp == NULL) {
        SHL_FAIL(st, SHL_CODE_BAD_VALUE, "Unknown fail point '%s'", name);
    }
    spec = bson_new_from_json((const uint8_t *)json, -1, &err);
    if (spec == NULL || !bson_iter_init_find(&mode, spec, "mode")) {
        SHL_FAIL(st, SHL_CODE_BAD_VALUE, "failpoint.%s takes {mode: ...}, got '%s'", name, json);
    }
    if (shl_bson_get_subdoc(spec, "data", &data)) {
        SHL_ERR(shl_failpoint_configure(fp, &mode, &data, &entered, st));
    } else {
        SHL_ERR(shl_failpoint_configure(fp, &mode, NULL, &entered, st));
    }
done:
    if (spec != NULL) {
        bson_destroy(spec);
    }
    return ret;
}

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
    if (strncmp(name, "failpoint.", 10) == 0) {
        ret = set_failpoint(name + 10, eq + 1, st);
        goto done;
    }
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
    bool given[SHL_OPT_COUNT] = {false};

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
            bool is_bool =
                bson_iter_init(&it, &probe) && shl_iter_next(&it) && BSON_ITER_HOLDS_BOOL(&it);
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
        given[id] = true;
    }
    /* Test-only parameters need test commands (options are read in any order, so here). */
    if (bson_has_field(&params, "testTreatClientsAsUnauthorizedForClusterTime") &&
        !shl_opt_bool(SHL_OPT_enableTestCommands)) {
        SHL_FAIL(st, SHL_CODE_BAD_VALUE,
                 "testTreatClientsAsUnauthorizedForClusterTime requires enableTestCommands=1");
    }
    build_parsed(parsed, given, &params);
done:
    bson_destroy(&params);
    *argv_out = av;
    *parsed_out = parsed;
    return ret;
}
