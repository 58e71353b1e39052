/*
 * db_common.c -- helpers the data node's commands share (db_private.h): the node of an
 * operation, $clusterTime gossip, the per-operation write timestamp, namespaces.
 */
#include <string.h>

#include "base/clock.h"
#include "bson/bson_iter.h"
#include "bson/bson_util.h"
#include "db/db_private.h"
#include "db/exec.h"
#include "net/command_args.h"
#include "query/expression.h"

db_node_t *
db_node(const shl_op_ctx_t *op)
{
    return (db_node_t *)op->svc->role_state;
}

void
db_cmd_begin(shl_op_ctx_t *op)
{
    db_node_t *node = db_node(op);

    /* Only a $clusterTime that passed its checks (net/cluster_time.h) moves the clock. */
    if (node->repl_set && op->cluster_time_checked != 0) {
        shl_storage_clock_advance(node->eng, op->cluster_time_checked);
    }
}

/* The newest timestamp written by the operation running on this thread. */
static __thread uint64_t op_write_ts;

void
db_op_note_write_ts(uint64_t ts)
{
    if (ts > op_write_ts) {
        op_write_ts = ts;
    }
}

uint64_t
db_op_write_ts(void)
{
    return op_write_ts;
}

uint64_t
db_op_take_write_ts(void)
{
    uint64_t ts = op_write_ts;
    op_write_ts = 0;
    return ts;
}

int
db_ns_from_cmd(const shl_op_ctx_t *op, const bson_t *cmd, shl_ns_t *ns, shl_status_t *st)
{
    int ret = 0;
    const char *coll;

    SHL_ERR(shl_cmd_collection_arg(cmd, &coll, st));
    SHL_ERR(shl_ns_make(ns, op->db, coll, st));
done:
    return ret;
}

bool
db_ns_is_oplog(const char *ns)
{
    return strcmp(ns, "local.oplog.rs") == 0;
}

int
db_check_user_write_ns(const shl_ns_t *ns, shl_status_t *st)
{
    if (db_ns_is_oplog(ns->full)) {
        return shl_status_set(st, SHL_CODE_ILLEGAL_OPERATION,
                              "Cannot write to the oplog (%s) directly", ns->full);
    }
    if (strcmp(ns->coll, "system.profile") == 0 || strcmp(ns->coll, "system.views") == 0) {
        return shl_status_set(st, SHL_CODE_INVALID_NAMESPACE, "cannot write to '%s'", ns->full);
    }
    if (shl_ns_is_system(ns) && strcmp(ns->coll, "system.js") != 0 &&
        strcmp(ns->coll, "system.users") != 0 && strcmp(ns->coll, "system.roles") != 0 &&
        strcmp(ns->coll, "system.version") != 0 && strcmp(ns->coll, "system.sessions") != 0 &&
        strcmp(ns->coll, "system.keys") != 0 && strcmp(ns->coll, "system.buckets") != 0 &&
        /* the DDL coordinators' state documents (shard/ddl_coordinators.h) */
        strcmp(ns->full, "config.system.sharding_ddl_coordinators") != 0 &&
        strncmp(ns->coll, "system.buckets.", 15) != 0) {
        return shl_status_set(st, SHL_CODE_INVALID_NAMESPACE, "Invalid system namespace: %s",
                              ns->full);
    }
    if (strstr(ns->coll, ".system.") != NULL && strstr(ns->coll, ".system.sessions") == NULL) {
        return shl_status_set(st, SHL_CODE_BAD_VALUE, "Invalid namespace: %s", ns->full);
    }
    return 0;
}

void
db_append_ts(bson_t *doc, const char *key, uint64_t ts)
{
    bson_append_timestamp(doc, key, -1, SHL_TS_SECS(ts), SHL_TS_INC(ts));
}

int
db_let_vars(shl_op_ctx_t *op, const bson_t *cmd, bool always, bson_t *out, bool *has,
            shl_status_t *st)
{
    int ret = 0;
    db_node_t *node = db_node(op);
    bson_iter_t it;
    bson_t let, builtins = BSON_INITIALIZER;
    bson_iter_t let_it = {0}, rc_it = {0};
    bool has_let = false, has_rc = false, has_ct = false;
    int64_t now_ms;

    /* One pass for both fields (this runs for every find). */
    if (bson_iter_init(&it, cmd)) {
        while (shl_iter_next(&it)) {
            const char *k = shl_iter_key(&it);
            if (!has_let && strcmp(k, "let") == 0) {
                let_it = it;
                has_let = true;
            } else if (!has_rc && strcmp(k, "legacyRuntimeConstants") == 0) {
                rc_it = it;
                has_rc = true;
            }
        }
    }
    bson_init(out);
    *has = false;
    if (has_let && !BSON_ITER_HOLDS_DOCUMENT(&let_it)) {
        SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH,
                 "BSON field '%s.let' is the wrong type '%s', expected type 'object'",
                 shl_cmd_name(cmd), shl_bson_type_name(shl_iter_type(&let_it)));
    }
    if (!has_let && !always && !has_rc) {
        goto done;
    }
    now_ms = shl_clock_wall_ms();
    if (has_rc && BSON_ITER_HOLDS_DOCUMENT(&rc_it)) {
        /* A router's command: its $$NOW and $$CLUSTER_TIME, the same on every shard. */
        bson_iter_t rc;
        bson_iter_recurse(&rc_it, &rc);
        while (bson_iter_next(&rc)) {
            if (strcmp(bson_iter_key(&rc), "localNow") == 0 && BSON_ITER_HOLDS_DATE_TIME(&rc)) {
                now_ms = bson_iter_date_time(&rc);
            } else if (strcmp(bson_iter_key(&rc), "clusterTime") == 0 &&
                       BSON_ITER_HOLDS_TIMESTAMP(&rc)) {
                uint32_t t, i;
                bson_iter_timestamp(&rc, &t, &i);
                BSON_APPEND_TIMESTAMP(&builtins, "CLUSTER_TIME", t, i);
                has_ct = true;
            }
        }
    }
    /* $$NOW is one value for the whole command, as in MongoDB. */
    BSON_APPEND_DATE_TIME(&builtins, "NOW", now_ms);
    if (node->repl_set && !has_ct) {
        /* $$CLUSTER_TIME exists on replica-set members only, as in MongoDB. */
        uint64_t now = shl_storage_clock_now(node->eng);
        BSON_APPEND_TIMESTAMP(&builtins, "CLUSTER_TIME", SHL_TS_SECS(now), SHL_TS_INC(now));
    }
    if (has_let) {
        const uint8_t *data;
        uint32_t len;
        bson_iter_document(&let_it, &len, &data);
        bson_init_static(&let, data, len);
    } else {
        bson_init(&let);
    }
    bson_destroy(out);
    ret = shl_expr_let_vars(&let, now_ms, &builtins, out, st);
    *has = ret == 0;
done:
    bson_destroy(&builtins);
    return ret;
}

int
db_cmd_collator(const bson_t *cmd, const char *field, shl_collator_t **out, bool *has,
                shl_status_t *st)
{
    bson_iter_t it;
    *out = NULL;
    *has = bson_iter_init_find(&it, cmd, field);
    if (!*has) {
        return 0;
    }
    return shl_collator_from_iter(&it, field, out, st);
}

int
db_query_collation(const bson_t *cmd, const char *field, exec_query_t *q, shl_status_t *st)
{
    shl_collator_t *c = NULL;
    bool has = false;
    int ret = db_cmd_collator(cmd, field, &c, &has, st);
    if (ret == 0 && has) {
        exec_query_set_collator(q, c, true);
    }
    shl_collator_release(c);
    return ret;
}

int
db_check_collation(const bson_t *cmd, const char *field, shl_status_t *st)
{
    shl_collator_t *c = NULL;
    bool has = false;
    int ret = db_cmd_collator(cmd, field, &c, &has, st);
    shl_collator_release(c);
    return ret;
}

int
db_cmd_get_hint(const bson_t *cmd, bool *has, bson_value_t *hint, shl_status_t *st)
{
    bson_iter_t it;
    *has = false;
    if (!bson_iter_init_find(&it, cmd, "hint")) {
        return 0;
    }
    if (!BSON_ITER_HOLDS_UTF8(&it) && !BSON_ITER_HOLDS_DOCUMENT(&it)) {
        return shl_status_set(st, SHL_CODE_FAILED_TO_PARSE, "hint must be a string or an object");
    }
    *hint = *bson_iter_value(&it);
    /* {} and "" mean no hint, as in MongoDB. */
    *has = !(BSON_ITER_HOLDS_UTF8(&it) && hint->value.v_utf8.len == 0) &&
           !(BSON_ITER_HOLDS_DOCUMENT(&it) && hint->value.v_doc.data_len <= 5);
    return 0;
}

/* A cursor source over the documents of an owned array. */
typedef struct array_source {
    bson_t *docs;
    bson_iter_t it;
    bson_t cur;
} array_source_t;

static int
array_next(void *state, shl_op_ctx_t *op, const bson_t **doc, shl_status_t *st)
{
    array_source_t *a = state;
    const uint8_t *data;
    uint32_t len;
    (void)op;
    (void)st;
    *doc = NULL;
    while (shl_iter_next(&a->it)) {
        if (BSON_ITER_HOLDS_DOCUMENT(&a->it)) {
            bson_iter_document(&a->it, &len, &data);
            if (bson_init_static(&a->cur, data, len)) {
                *doc = &a->cur;
                break;
            }
        }
    }
    return 0;
}

static void
array_destroy(void *state)
{
    array_source_t *a = state;
    bson_destroy(a->docs);
    bson_free(a);
}

static const shl_cursor_source_ops_t array_ops = {array_next, array_destroy};

void
db_reply_array_cursor(shl_op_ctx_t *op, const char *ns, bson_t *docs, int64_t batch_size,
                      bson_t *reply)
{
    db_node_t *node = db_node(op);
    array_source_t *a = bson_aligned_alloc0(BSON_ALIGNOF(array_source_t), sizeof(*a));
    shl_cursor_t *c;
    shl_status_t st = SHL_STATUS_INIT;
    bson_t arr = BSON_INITIALIZER;
    bool exhausted = false;
    int64_t id = 0;

    a->docs = docs;
    bson_iter_init(&a->it, a->docs);
    c = shl_cursor_new(ns, &array_ops, a);
    /* The source cannot fail; an interrupt simply ends the batch early. */
    if (shl_cursor_fill_batch(op, c, batch_size, true, &arr, &exhausted, &st) != 0) {
        exhausted = true;
    }
    if (exhausted) {
        shl_cursor_destroy(c);
    } else {
        id = shl_cursor_manager_register(node->cursors, c, op);
    }
    shl_cursor_reply(reply, ns, id, true, &arr);
    bson_destroy(&arr);
}

int
db_cursor_batch_size(const bson_t *cmd, int64_t *out, shl_status_t *st)
{
    bson_iter_t it, sub;
    *out = 0;
    if (!bson_iter_init_find(&it, cmd, "cursor")) {
        return 0;
    }
    if (!BSON_ITER_HOLDS_DOCUMENT(&it)) {
        return shl_status_set(st, SHL_CODE_TYPE_MISMATCH,
                              "BSON field '%s.cursor' is the wrong type '%s', expected type "
                              "'object'",
                              shl_cmd_name(cmd), shl_bson_type_name(shl_iter_type(&it)));
    }
    bson_iter_recurse(&it, &sub);
    while (shl_iter_next(&sub)) {
        if (strcmp(shl_iter_key(&sub), "batchSize") == 0) {
            if (!BSON_ITER_HOLDS_NUMBER(&sub)) {
                return shl_status_set(st, SHL_CODE_TYPE_MISMATCH,
                                      "BSON field 'cursor.batchSize' is the wrong type '%s', "
                                      "expected types '[long, int, decimal, double]'",
                                      shl_bson_type_name(shl_iter_type(&sub)));
            }
            *out = bson_iter_as_int64(&sub);
            if (*out < 0) {
                return shl_status_set(st, 51024,
                                      "BSON field 'batchSize' value must be >= 0, actual value "
                                      "'%lld'",
                                      (long long)*out);
            }
        } else {
            return shl_status_set(st, SHL_CODE_IDL_UNKNOWN_FIELD,
                                  "BSON field 'cursor.%s' is an unknown field.",
                                  shl_iter_key(&sub));
        }
    }
    return 0;
}
