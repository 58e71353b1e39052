/*
 * concerns.c -- read and write concerns on a data node (db_private.h): validation
 * against the topology (standalone or a replica set of one) with MongoDB's errors, the
 * read timestamp of each read concern level, and waiting for j / w:"majority".
 */
#include <string.h>

#include "bson/bson_iter.h"
#include "bson/bson_util.h"
#include "db/db_private.h"
#include "db/read_concern_wait.h"

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
parse_read_concern(const bson_t *doc, db_read_concern_t *rc, shl_status_t *st)
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
                rc->level = DB_RC_LOCAL;
            } else if (strcmp(lv, "majority") == 0) {
                rc->level = DB_RC_MAJORITY;
            } else if (strcmp(lv, "available") == 0) {
                rc->level = DB_RC_AVAILABLE;
            } else if (strcmp(lv, "linearizable") == 0) {
                rc->level = DB_RC_LINEARIZABLE;
            } else if (strcmp(lv, "snapshot") == 0) {
                rc->level = DB_RC_SNAPSHOT;
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
check_combinations(const db_read_concern_t *rc, shl_status_t *st)
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
    if (rc->has_after_cluster_time && rc->level != DB_RC_MAJORITY && rc->level != DB_RC_LOCAL &&
        rc->level != DB_RC_SNAPSHOT) {
        SHL_FAIL(st, SHL_CODE_INVALID_OPTIONS,
                 "afterClusterTime field can be set only if level is equal to majority, local, "
                 "or snapshot");
    }
    if (rc->has_after_op_time && rc->level == DB_RC_SNAPSHOT) {
        SHL_FAIL(st, SHL_CODE_INVALID_OPTIONS,
                 "afterOpTime field cannot be set if level is equal to snapshot");
    }
    if (rc->has_at_cluster_time && rc->level != DB_RC_SNAPSHOT) {
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
db_read_concern_get(shl_op_ctx_t *op, db_read_concern_t *rc, shl_status_t *st)
{
    int ret = 0;
    db_node_t *node = db_node(op);

    memset(rc, 0, sizeof(*rc));
    rc->level = DB_RC_LOCAL;
    if (!op->has_read_concern) {
        return 0;
    }
    SHL_ERR(parse_read_concern(&op->read_concern, rc, st));
    SHL_ERR(check_combinations(rc, st));
    if (rc->level == DB_RC_SNAPSHOT) {
        ret = db_snapshot_read_prepare(op, rc, st);
        goto done;
    }
    /* Then MongoDB's waitForReadConcern: the topology, and the waits. */
    if (rc->level == DB_RC_LINEARIZABLE) {
        if (!node->repl_set) {
            SHL_FAIL(st, SHL_CODE_NOT_A_REPLICA_SET,
                     "node needs to be a replica set member to use read concern");
        }
        if (rc->has_after_op_time) {
            SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE,
                     "afterOpTime not compatible with linearizable read concern");
        }
    }
    if (rc->has_after_cluster_time) {
        if (!node->repl_set) {
            SHL_FAIL(st, SHL_CODE_ILLEGAL_OPERATION,
                     "Cannot specify afterClusterTime readConcern without replication enabled");
        }
        SHL_ERR(db_rc_wait_after_cluster_time(op, rc->after_cluster_time, st));
    }
    if (rc->has_after_op_time) {
        if (!node->repl_set) {
            SHL_FAIL(st, SHL_CODE_NOT_A_REPLICA_SET,
                     "node needs to be a replica set member to use readConcern: afterOpTime");
        }
        /* An internal argument (config reads at the ConfigTime): wait for it to commit. */
        SHL_ERR(db_rc_wait_committed(op, rc->after_op_time, st));
    }
done:
    return ret;
}

uint64_t
db_read_timestamp(const db_node_t *node, const db_read_concern_t *rc)
{
    if (rc->level == DB_RC_SNAPSHOT) {
        return rc->at_cluster_time;
    }
    if (rc->level == DB_RC_MAJORITY || rc->level == DB_RC_LINEARIZABLE) {
        return shl_storage_all_durable(node->eng);
    }
    return 0;
}

int
db_write_concern_get(shl_op_ctx_t *op, shl_write_concern_t *wc, shl_status_t *st)
{
    int ret = 0;
    db_node_t *node = db_node(op);

    SHL_ERR(shl_write_concern_parse(op->has_write_concern ? &op->write_concern : NULL, wc, st));
    if (!node->repl_set) {
        if (!wc->w_majority && wc->w_tag[0] == '\0' && wc->w > 1) {
            SHL_FAIL(st, SHL_CODE_BAD_VALUE, "cannot use 'w' > 1 when a host is not replicated");
        }
        if (wc->w_tag[0] != '\0') {
            SHL_FAIL(st, SHL_CODE_BAD_VALUE,
                     "cannot use non-majority 'w' mode %s when a host is not a member of a "
                     "replica set",
                     wc->w_tag);
        }
    }
done:
    return ret;
}

static void
append_wce(const shl_write_concern_t *wc, const shl_status_t *err, bson_t *reply)
{
    bson_t wce, info;
    BSON_APPEND_DOCUMENT_BEGIN(reply, "writeConcernError", &wce);
    BSON_APPEND_INT32(&wce, "code", err->code);
    BSON_APPEND_UTF8(&wce, "codeName", shl_code_name(err->code));
    BSON_APPEND_UTF8(&wce, "errmsg", err->reason);
    BSON_APPEND_DOCUMENT_BEGIN(&wce, "errInfo", &info);
    shl_write_concern_append(wc, &info, "writeConcern");
    bson_append_document_end(&wce, &info);
    bson_append_document_end(reply, &wce);
}

void
db_write_concern_wait(shl_op_ctx_t *op, const shl_write_concern_t *wc, bson_t *reply)
{
    db_node_t *node = db_node(op);
    shl_status_t err = SHL_STATUS_INIT;

    if (shl_write_concern_unacknowledged(wc)) {
        return;
    }
    if (shl_write_concern_needs_journal(wc)) {
        uint64_t ts = db_op_write_ts();
        if (ts == 0) {
            ts = shl_storage_clock_now(node->eng);
        }
        if (shl_storage_wait_durable(node->eng, ts, &err) != 0) {
            append_wce(wc, &err, reply);
            return;
        }
    }
    if (node->repl_set) {
        if (wc->w_tag[0] != '\0') {
            shl_status_set(&err, SHL_CODE_UNKNOWN_REPL_WRITE_CONCERN,
                           "No write concern mode named '%s' found in replica set "
                           "configuration",
                           wc->w_tag);
            append_wce(wc, &err, reply);
        } else if (!wc->w_majority && wc->w > 1) {
            shl_status_set(&err, SHL_CODE_UNSATISFIABLE_WRITE_CONCERN,
                           "Not enough data-bearing nodes");
            append_wce(wc, &err, reply);
        }
    }
}
