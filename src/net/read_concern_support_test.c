/*
 * read_concern_support_test.c -- which commands take which readConcern (read_concern_support.h):
 * a table of requests and the code, and message, each gets.
 */
#include <string.h>

#include "base/unit_test.h"
#include "net/read_concern_support.h"

typedef struct rc_case {
    const char *cmd;
    const char *body;
    const char *rc; /* NULL: none */
    int code;
    const char *msg; /* expected errmsg when code != 0 (NULL: not checked) */
} rc_case_t;

static const rc_case_t k_cases[] = {
    {"insert", "{'insert': 'c'}", NULL, 0, NULL},
    {"insert", "{'insert': 'c'}", "{'level': 'local'}", 0, NULL},
    {"insert", "{'insert': 'c'}", "{'level': 'majority'}", 72,
     "Command insert does not support { readConcern: { level: \"majority\", provenance: "
     "\"clientSupplied\" } } :: caused by :: read concern not supported"},
    {"findAndModify", "{'findAndModify': 'c'}", "{'level': 'available'}", 72, NULL},
    {"listCollections", "{'listCollections': 1}", "{'level': 'linearizable'}", 72, NULL},
    /* Snapshot and malformed levels are other checks' to refuse. */
    {"insert", "{'insert': 'c'}", "{'level': 'snapshot'}", 0, NULL},
    {"insert", "{'insert': 'c'}", "{'level': 'bogus'}", 0, NULL},
    {"insert", "{'insert': 'c'}", "{'level': 1}", 0, NULL},
    {"find", "{'find': 'c'}", "{'level': 'linearizable'}", 0, NULL},
    {"count", "{'count': 'c'}", "{'level': 'available'}", 0, NULL},
    {"distinct", "{'distinct': 'c'}",
     "{'level': 'majority', 'afterClusterTime': "
     "{'$timestamp': {'t': 5, 'i': 1}}}",
     0, NULL},
    {"aggregate", "{'aggregate': 'c', 'pipeline': [{'$match': {}}, {'$out': 'o'}]}",
     "{'level': 'majority'}", 0, NULL},
    {"aggregate", "{'aggregate': 'c', 'pipeline': [{'$match': {}}, {'$out': 'o'}]}",
     "{'level': 'linearizable'}", 72,
     "Command aggregate does not support { readConcern: { level: \"linearizable\", provenance: "
     "\"clientSupplied\" } } :: caused by :: $out cannot be used with a 'linearizable' read "
     "concern level"},
    {"aggregate", "{'aggregate': 'c', 'pipeline': [{'$merge': {'into': 'm'}}]}",
     "{'level': 'linearizable', 'provenance': 'customDefault'}", 72,
     "Command aggregate does not support { readConcern: { level: \"linearizable\", provenance: "
     "\"customDefault\" } } :: caused by :: $merge cannot be used with a 'linearizable' read "
     "concern level"},
    {"getMore", "{'getMore': 1}", "{'level': 'majority'}", 0, NULL},
    {"getMore", "{'getMore': 1}", "{'afterClusterTime': {'$timestamp': {'t': 5, 'i': 1}}}", 72,
     "afterClusterTime is not allowed for this command"},
    {"mapReduce", "{'mapReduce': 'c'}", "{'level': 'available'}", 0, NULL},
    {"mapReduce", "{'mapReduce': 'c'}", "{'level': 'majority'}", 72, NULL},
};

SHL_TEST(read_concern_support_table)
{
    for (size_t i = 0; i < sizeof(k_cases) / sizeof(k_cases[0]); i++) {
        const rc_case_t *c = &k_cases[i];
        bson_t *body = shl_test_bson(c->body);
        bson_t *rc = c->rc != NULL ? shl_test_bson(c->rc) : NULL;
        shl_status_t st = SHL_STATUS_INIT;
        int code = shl_read_concern_check_support(c->cmd, body, rc, &st);

        if (code != c->code) {
            printf("case %zu: %s %s\n", i, c->cmd, c->rc != NULL ? c->rc : "-");
        }
        ASSERT_INT_EQ(code, c->code);
        if (c->msg != NULL) {
            ASSERT_STR_EQ(st.reason, c->msg);
        }
        bson_destroy(body);
        if (rc != NULL) {
            bson_destroy(rc);
        }
    }
}

typedef struct parse_case {
    const char *rc;
    int code;
    const char *msg; /* NULL: not checked */
} parse_case_t;

static const parse_case_t k_parse_cases[] = {
    {"{}", 0, NULL},
    {"{'level': 'majority', 'afterClusterTime': {'$timestamp': {'t': 5, 'i': 1}}}", 0, NULL},
    {"{'afterClusterTime': {'$timestamp': {'t': 0, 'i': 1}}}", 0, NULL},
    {"{'level': 'eventual'}", 2,
     "Enumeration value 'eventual' for field 'readConcern.level' is not a valid value."},
    {"{'level': 2}", 14, NULL},
    {"{'level': 'local', 'x': 1}", 40415, "BSON field 'readConcern.x' is an unknown field."},
    {"{'afterClusterTime': 5}", 14, NULL},
    {"{'afterClusterTime': {'$timestamp': {'t': 0, 'i': 0}}}", 72,
     "afterClusterTime cannot be a null timestamp"},
    {"{'afterClusterTime': {'$timestamp': {'t': 5, 'i': 1}}, 'afterOpTime': {'ts': "
     "{'$timestamp': {'t': 5, 'i': 1}}, 't': 1}}",
     72, "Can not specify both afterClusterTime and afterOpTime"},
    {"{'level': 'available', 'afterClusterTime': {'$timestamp': {'t': 5, 'i': 1}}}", 72,
     "afterClusterTime field can be set only if level is equal to majority, local, or snapshot"},
    {"{'level': 'linearizable', 'afterClusterTime': {'$timestamp': {'t': 5, 'i': 1}}}", 72, NULL},
    {"{'level': 'snapshot', 'afterOpTime': {'ts': {'$timestamp': {'t': 5, 'i': 1}}, 't': 1}}", 72,
     "afterOpTime field cannot be set if level is equal to snapshot"},
    {"{'level': 'local', 'atClusterTime': {'$timestamp': {'t': 5, 'i': 1}}}", 72,
     "atClusterTime field can be set only if level is equal to snapshot"},
    {"{'afterOpTime': 1}", 14, NULL},
    {"{'afterOpTime': {'t': 1}}", 4, NULL},
};

SHL_TEST(read_concern_parse_table)
{
    for (size_t i = 0; i < sizeof(k_parse_cases) / sizeof(k_parse_cases[0]); i++) {
        const parse_case_t *c = &k_parse_cases[i];
        bson_t *rc = shl_test_bson(c->rc);
        shl_read_concern_t out;
        shl_status_t st = SHL_STATUS_INIT;
        int code = shl_read_concern_parse(rc, &out, &st);

        if (code != c->code) {
            printf("case %zu: %s\n", i, c->rc);
        }
        ASSERT_INT_EQ(code, c->code);
        if (c->msg != NULL) {
            ASSERT_STR_EQ(st.reason, c->msg);
        }
        bson_destroy(rc);
    }
}

SHL_TEST(read_concern_parse_fills_the_times)
{
    bson_t *rc = shl_test_bson("{'level': 'majority', 'afterClusterTime': {'$timestamp': "
                               "{'t': 7, 'i': 3}}, 'provenance': 'clientSupplied'}");
    shl_read_concern_t out;
    shl_status_t st = SHL_STATUS_INIT;

    ASSERT_INT_EQ(shl_read_concern_parse(rc, &out, &st), 0);
    ASSERT(out.level == SHL_RC_MAJORITY && out.has_level && out.has_after_cluster_time);
    ASSERT(out.after_cluster_time == (((uint64_t)7 << 32) | 3));
    ASSERT(!out.has_at_cluster_time && !out.has_after_op_time);
    bson_destroy(rc);
}
