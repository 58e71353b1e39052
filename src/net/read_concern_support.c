/*
 * read_concern_support.c -- see read_concern_support.h. The table is MongoDB's: commands
 * inherit "local only" unless they say otherwise.
 */
#include "net/read_concern_support.h"

#include <string.h>

#include "bson/bson_iter.h"
#include "bson/bson_util.h"

/* readConcern.afterOpTime {ts, t}: its timestamp (the term is not compared on a set of one). */
static int
parse_after_op_time(bson_iter_t *it, uint64_t *ts, shl_status_t *st)
{
    int ret = 0;
    bson_iter_t sub;

    if (!BSON_ITER_HOLDS_DOCUMENT(it)) {
        SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH,
                 "BSON field 'readConcern.afterOpTime' is the wrong type '%s', expected type "
                 "'object'",
                 shl_bson_type_name(shl_iter_type(it)));
    }
    if (!bson_iter_recurse(it, &sub) || !bson_iter_find(&sub, "ts")) {
        SHL_FAIL(st, SHL_CODE_NO_SUCH_KEY, "Missing expected field \"ts\"");
    }
    if (!BSON_ITER_HOLDS_TIMESTAMP(&sub)) {
        SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH,
                 "\"ts\" had the wrong type. Expected timestamp, found %s",
                 shl_bson_type_name(shl_iter_type(&sub)));
    }
    *ts = shl_bson_iter_timestamp_u64(&sub);
done:
    return ret;
}

/* The field-by-field parse of a readConcern document: types, names, the level's values. */
static int
parse_fields(const bson_t *doc, shl_read_concern_t *rc, shl_status_t *st)
{
    int ret = 0;
    bson_iter_t it;

    if (!bson_iter_init(&it, doc)) {
        goto done;
    }
    while (shl_iter_next(&it)) {
        const char *k = shl_iter_key(&it);
        if (strcmp(k, "level") == 0) {
            const char *lv;
            if (!BSON_ITER_HOLDS_UTF8(&it)) {
                SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH,
                         "BSON field 'readConcern.level' is the wrong type '%s', expected type "
                         "'string'",
                         shl_bson_type_name(shl_iter_type(&it)));
            }
            lv = bson_iter_utf8(&it, NULL);
            rc->has_level = true;
            if (strcmp(lv, "local") == 0) {
                rc->level = SHL_RC_LOCAL;
            } else if (strcmp(lv, "majority") == 0) {
                rc->level = SHL_RC_MAJORITY;
            } else if (strcmp(lv, "available") == 0) {
                rc->level = SHL_RC_AVAILABLE;
            } else if (strcmp(lv, "linearizable") == 0) {
                rc->level = SHL_RC_LINEARIZABLE;
            } else if (strcmp(lv, "snapshot") == 0) {
                rc->level = SHL_RC_SNAPSHOT;
            } else {
                SHL_FAIL(st, SHL_CODE_BAD_VALUE,
                         "Enumeration value '%s' for field 'readConcern.level' is not a valid "
                         "value.",
                         lv);
            }
        } else if (strcmp(k, "afterClusterTime") == 0) {
            if (!BSON_ITER_HOLDS_TIMESTAMP(&it)) {
                SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH,
                         "BSON field 'readConcern.afterClusterTime' is the wrong type '%s', "
                         "expected type 'timestamp'",
                         shl_bson_type_name(shl_iter_type(&it)));
            }
            rc->has_after_cluster_time = true;
            rc->after_cluster_time = shl_bson_iter_timestamp_u64(&it);
        } else if (strcmp(k, "atClusterTime") == 0) {
            if (!BSON_ITER_HOLDS_TIMESTAMP(&it)) {
                SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH,
                         "BSON field 'readConcern.atClusterTime' is the wrong type '%s', "
                         "expected type 'timestamp'",
                         shl_bson_type_name(shl_iter_type(&it)));
            }
            rc->has_at_cluster_time = true;
            rc->at_cluster_time = shl_bson_iter_timestamp_u64(&it);
        } else if (strcmp(k, "afterOpTime") == 0) {
            SHL_ERR(parse_after_op_time(&it, &rc->after_op_time, st));
            rc->has_after_op_time = true;
        } else if (strcmp(k, "provenance") != 0) {
            SHL_FAIL(st, SHL_CODE_IDL_UNKNOWN_FIELD,
                     "BSON field 'readConcern.%s' is an unknown field.", k);
        }
    }
done:
    return ret;
}

/* The combinations MongoDB's ReadConcernArgs refuses, in its order. */
static int
check_combinations(const shl_read_concern_t *rc, shl_status_t *st)
{
    int ret = 0;

    if (rc->has_after_cluster_time && rc->has_after_op_time) {
        SHL_FAIL(st, SHL_CODE_INVALID_OPTIONS,
                 "Can not specify both afterClusterTime and afterOpTime");
    }
    if (rc->has_at_cluster_time && rc->has_after_cluster_time) {
        SHL_FAIL(st, SHL_CODE_INVALID_OPTIONS,
                 "Can not specify both afterClusterTime and atClusterTime");
    }
    /* available never waits; a linearizable read is causally consistent by itself. */
    if (rc->has_after_cluster_time && rc->level != SHL_RC_MAJORITY && rc->level != SHL_RC_LOCAL &&
        rc->level != SHL_RC_SNAPSHOT) {
        SHL_FAIL(st, SHL_CODE_INVALID_OPTIONS,
                 "afterClusterTime field can be set only if level is equal to majority, local, "
                 "or snapshot");
    }
    if (rc->has_after_op_time && rc->level == SHL_RC_SNAPSHOT) {
        SHL_FAIL(st, SHL_CODE_INVALID_OPTIONS,
                 "afterOpTime field cannot be set if level is equal to snapshot");
    }
    if (rc->has_at_cluster_time && rc->level != SHL_RC_SNAPSHOT) {
        SHL_FAIL(st, SHL_CODE_INVALID_OPTIONS,
                 "atClusterTime field can be set only if level is equal to snapshot");
    }
    if (rc->has_at_cluster_time && rc->at_cluster_time == 0) {
        SHL_FAIL(st, SHL_CODE_INVALID_OPTIONS, "atClusterTime cannot be a null timestamp");
    }
    if (rc->has_after_cluster_time && rc->after_cluster_time == 0) {
        SHL_FAIL(st, SHL_CODE_INVALID_OPTIONS, "afterClusterTime cannot be a null timestamp");
    }
done:
    return ret;
}

int
shl_read_concern_parse(const bson_t *doc, shl_read_concern_t *rc, shl_status_t *st)
{
    int ret = 0;

    memset(rc, 0, sizeof(*rc));
    rc->level = SHL_RC_LOCAL;
    SHL_ERR(parse_fields(doc, rc, st));
    SHL_ERR(check_combinations(rc, st));
done:
    return ret;
}

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
char *
shl_read_concern_to_string(const bson_t *rc)
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
            desc = shl_read_concern_to_string(rc);
            SHL_FAIL(st, SHL_CODE_INVALID_OPTIONS,
                     "Command %s does not support %s :: caused by :: %s", cmd_name, desc, why);
        }
    }
    if ((flags & RC_NO_AFTER_CT) && bson_iter_init_find(&it, rc, "afterClusterTime")) {
        SHL_FAIL(st, SHL_CODE_INVALID_OPTIONS, "afterClusterTime is not allowed for this command");
    }
done:
    bson_free(desc);
    return ret;
}
