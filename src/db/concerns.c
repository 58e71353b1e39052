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
#include "db/txn_participant.h"
#include "net/server.h"

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
    SHL_ERR(shl_read_concern_parse(&op->read_concern, rc, st));
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
        /* A multi-member set reads at the majority commit point (repl_hooks.h). */
        if (node->repl.majority_ts != NULL) {
            return node->repl.majority_ts(node->repl.arg);
        }
        return shl_storage_all_durable(node->eng);
    }
    return 0;
}

int
db_read_ts_for(shl_op_ctx_t *op, const db_read_concern_t *rc, const char *ns, uint64_t *ts,
               shl_status_t *st)
{
    int ret = 0;
    db_node_t *node = db_node(op);
    shl_collection_t *c = NULL;

    if (op->txn != NULL) {
        *ts = db_txn_read_ts_for(op, ns);
        goto done;
    }
    *ts = db_read_timestamp(node, rc);
    if (*ts != 0 && (rc->level == DB_RC_MAJORITY || rc->level == DB_RC_LINEARIZABLE)) {
        c = shl_catalog_get(node->eng, ns);
        if (c != NULL && c->min_visible_ts > *ts) {
            SHL_ERR(db_rc_wait_majority(op, rc, c->min_visible_ts, ts, st));
        }
    }
done:
    shl_collection_release(c);
    return ret;
}

/* The commands of a transaction that take a write concern (MongoDB's isTransactionCommand). */
static bool
is_txn_decision(const char *name)
{
    return name != NULL &&
           (strcmp(name, "commitTransaction") == 0 || strcmp(name, "abortTransaction") == 0 ||
            strcmp(name, "prepareTransaction") == 0 ||
            strcmp(name, "coordinateCommitTransaction") == 0);
}

/*
 * The write concern of a request that sent none (or {}), as MongoDB 5.0+ resolves it on a
 * mongod: a client's write on a replica set member gets the implicit default
 * {w: "majority"} ("implicitDefault"; on a set of one that is the journal; {w: 1} on a set
 * with too many arbiters, repl_hooks.h implicit_wc_majority); a standalone's
 * stays {w: 1}; another cluster process's request (a router forwards the concern it
 * resolved, so this is internal work) gets {w: 1} "internalWriteDefault", as on a shard
 * server; an in-process operation and a transaction's statements (their commit carries the
 * concern) get {w: 1}. A node holds no cluster-wide default: the router applies those.
 */
static void
resolve_default(const shl_op_ctx_t *op, const db_node_t *node, shl_write_concern_t *wc)
{
    if (op->conn != NULL && op->conn->internal) {
        shl_write_concern_set_default(wc, false, "internalWriteDefault");
    } else {
        bool majority = node->repl_set && op->conn != NULL &&
                        (!op->has_autocommit || is_txn_decision(op->cmd_name)) &&
                        (node->repl.implicit_wc_majority == NULL ||
                         node->repl.implicit_wc_majority(node->repl.arg));
        shl_write_concern_set_default(wc, majority, "implicitDefault");
    }
}

int
db_write_concern_get(shl_op_ctx_t *op, shl_write_concern_t *wc, shl_status_t *st)
{
    int ret = 0;
    db_node_t *node = db_node(op);

    SHL_ERR(shl_write_concern_parse(op->has_write_concern ? &op->write_concern : NULL, wc, st));
    if (wc->is_default) {
        resolve_default(op, node, wc);
    }
    if (!node->repl_set && node->repl.wait_write_concern == NULL) {
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
    {
        /* The error's own details first (a timeout's wtimeout: true). */
        bson_t extra;
        if (shl_status_extra_get(err, &extra)) {
            bson_concat(&info, &extra);
        }
    }
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
    if (node->repl.wait_write_concern != NULL) {
        /* A multi-member set: wait for the members' progress (repl/). */
        uint64_t ts = db_op_write_ts();
        if (ts == 0) {
            ts = shl_storage_clock_now(node->eng);
        }
        if (node->repl.wait_write_concern(node->repl.arg, op, wc, ts, &err) != 0) {
            append_wce(wc, &err, reply);
        }
    } else if (node->repl_set) {
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

void
shl_db_repl_hooks_install(shl_service_ctx_t *svc, const shl_db_repl_hooks_t *h)
{
    db_node_t *node = svc->role_state;

    node->repl = *h;
}

int
shl_db_repl_wait_write_concern(const shl_service_ctx_t *svc, shl_op_ctx_t *op,
                               const shl_write_concern_t *wc, uint64_t ts, shl_status_t *st)
{
    const db_node_t *node = svc->role_state;

    if (node == NULL || node->repl.wait_write_concern == NULL) {
        return 0;
    }
    return node->repl.wait_write_concern(node->repl.arg, op, wc, ts, st);
}

int
shl_db_repl_wait_majority(const shl_service_ctx_t *svc, shl_op_ctx_t *op, uint64_t ts,
                          int64_t timeout_ms, shl_status_t *st)
{
    const db_node_t *node = svc->role_state;
    shl_write_concern_t wc;

    if (node == NULL || node->repl.wait_write_concern == NULL) {
        return 0;
    }
    memset(&wc, 0, sizeof(wc));
    wc.w_majority = true;
    wc.wtimeout_ms = timeout_ms;
    wc.provenance = "clientSupplied";
    return shl_db_repl_wait_write_concern(svc, op, &wc, ts, st);
}

bool
shl_db_repl_is_primary(const shl_service_ctx_t *svc)
{
    const db_node_t *node = svc->role_state;

    return node == NULL || node->repl.is_primary == NULL || node->repl.is_primary(node->repl.arg);
}

int
shl_db_repl_rollback_prepared(const shl_service_ctx_t *svc, uint64_t common)
{
    const db_node_t *node = svc->role_state;

    return node == NULL ? 0 : db_txn_rollback_prepared_after(node->txns, common);
}

int
shl_db_repl_rollback_prepared_done(const shl_service_ctx_t *svc)
{
    const db_node_t *node = svc->role_state;

    return node == NULL ? 0 : db_txn_rollback_done(node->txns);
}

bool
shl_db_repl_add_listener(const shl_service_ctx_t *svc, const shl_db_repl_listener_t *l)
{
    const db_node_t *node = svc->role_state;

    return node == NULL || node->repl.add_listener == NULL ||
           node->repl.add_listener(node->repl.arg, l);
}

void
shl_db_repl_stop_listeners(const shl_service_ctx_t *svc)
{
    const db_node_t *node = svc->role_state;

    if (node != NULL && node->repl.stop_listeners != NULL) {
        node->repl.stop_listeners(node->repl.arg);
    }
}
