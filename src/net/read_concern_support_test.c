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
    {"distinct", "{'distinct': 'c'}", "{'level': 'majority', 'afterClusterTime': "
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
