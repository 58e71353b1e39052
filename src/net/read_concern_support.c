/*
 * read_concern_support.c -- see read_concern_support.h. The table is MongoDB's: commands
 * inherit "local only" unless they say otherwise.
 */
#include "net/read_concern_support.h"

#include <string.h>

#include "bson/bson_iter.h"
#include "bson/bson_util.h"

/* What a command accepts besides "local". */
enum {
    RC_ALL = 1u << 0,       /* majority, available, linearizable */
    RC_AVAILABLE = 1u << 1, /* available */
    RC_NO_AFTER_CT = 1u << 2,
};

typedef struct rc_rule {
    const char *name;
    unsigned flags;
} rc_rule_t;

static const rc_rule_t k_rules[] = {
    {"find", RC_ALL},
    {"aggregate", RC_ALL},
    {"count", RC_ALL},
    {"distinct", RC_ALL},
    {"explain", RC_ALL},
    /* getMore reads with the readConcern of the command that made its cursor. */
    {"getMore", RC_ALL | RC_NO_AFTER_CT},
    {"mapReduce", RC_AVAILABLE | RC_NO_AFTER_CT},
};

static unsigned
rule_flags(const char *name)
{
    unsigned flags = 0;

    for (size_t i = 0; i < sizeof(k_rules) / sizeof(k_rules[0]); i++) {
        if (strcmp(k_rules[i].name, name) == 0) {
            flags = k_rules[i].flags;
            break;
        }
    }
    return flags;
}

/* The name of the last stage of an aggregate's pipeline ("" if none). */
static const char *
last_stage(const bson_t *body)
{
    bson_iter_t it, stages, stage;
    const char *name = "";

    if (!bson_iter_init_find(&it, body, "pipeline") || !BSON_ITER_HOLDS_ARRAY(&it) ||
        !bson_iter_recurse(&it, &stages)) {
        return name;
    }
    while (shl_iter_next(&stages)) {
        name = "";
        if (BSON_ITER_HOLDS_DOCUMENT(&stages) && bson_iter_recurse(&stages, &stage) &&
            shl_iter_next(&stage)) {
            name = shl_iter_key(&stage);
        }
    }
    return name;
}

/* Append rc's field 'key' to 'out' if it is there. */
static void
copy_field(const bson_t *rc, const char *key, bson_t *out)
{
    bson_iter_t it;

    if (bson_iter_init_find(&it, rc, key)) {
        bson_append_iter(out, key, -1, &it);
    }
}

/*
 * MongoDB's ReadConcernArgs::toString() of the request's readConcern: its fields in
 * MongoDB's order, the provenance the dispatcher gives a client's own readConcern included.
 */
static char *
describe(const bson_t *rc)
{
    bson_t outer = BSON_INITIALIZER, inner;
    bson_iter_t it;
    char *s;

    BSON_APPEND_DOCUMENT_BEGIN(&outer, "readConcern", &inner);
    copy_field(rc, "level", &inner);
    copy_field(rc, "afterOpTime", &inner);
    copy_field(rc, "afterClusterTime", &inner);
    copy_field(rc, "atClusterTime", &inner);
    if (bson_iter_init_find(&it, rc, "provenance")) {
        bson_append_iter(&inner, "provenance", -1, &it);
    } else {
        BSON_APPEND_UTF8(&inner, "provenance", "clientSupplied");
    }
    bson_append_document_end(&outer, &inner);
    s = shl_bson_to_string(&outer);
    bson_destroy(&outer);
    return s;
}

int
shl_read_concern_check_support(const char *cmd_name, const bson_t *body, const bson_t *rc,
                               shl_status_t *st)
{
    int ret = 0;
    bson_iter_t it;
    const char *level = NULL;
    const char *why = NULL;
    unsigned flags;
    char *desc = NULL;

    if (rc == NULL) {
        goto done;
    }
    flags = rule_flags(cmd_name);
    if (bson_iter_init_find(&it, rc, "level") && BSON_ITER_HOLDS_UTF8(&it)) {
        level = bson_iter_utf8(&it, NULL);
    }
    if (level != NULL) {
        if (strcmp(level, "majority") == 0 || strcmp(level, "linearizable") == 0) {
            why = (flags & RC_ALL) ? NULL : "read concern not supported";
        } else if (strcmp(level, "available") == 0) {
            why = (flags & (RC_ALL | RC_AVAILABLE)) ? NULL : "read concern not supported";
        }
        if (why == NULL && strcmp(level, "linearizable") == 0 &&
            strcmp(cmd_name, "aggregate") == 0) {
            const char *last = last_stage(body);
            if (strcmp(last, "$out") == 0) {
                why = "$out cannot be used with a 'linearizable' read concern level";
            } else if (strcmp(last, "$merge") == 0) {
                why = "$merge cannot be used with a 'linearizable' read concern level";
            }
        }
        if (why != NULL) {
            desc = describe(rc);
            SHL_FAIL(st, SHL_CODE_INVALID_OPTIONS, "Command %s does not support %s :: caused by :: %s",
                     cmd_name, desc, why);
        }
    }
    if ((flags & RC_NO_AFTER_CT) && bson_iter_init_find(&it, rc, "afterClusterTime")) {
        SHL_FAIL(st, SHL_CODE_INVALID_OPTIONS, "afterClusterTime is not allowed for this command");
    }
done:
    bson_free(desc);
    return ret;
}
