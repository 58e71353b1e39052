/*
 * cmd_write.c -- insert, update and delete on a data node, with MongoDB 7.0's batch
 * semantics (ordered stops at the first error, unordered goes on; writeErrors with the
 * statement index), implicit collection creation, write concerns, and WriteConflict
 * retries through shl_storage_write_retry. Consecutive valid inserts share one write
 * unit (up to INSERT_GROUP documents, as MongoDB groups them); a failure other than a
 * duplicate key redoes that group one document per unit.
 */
#include <string.h>

#include "base/clock.h"
#include "bson/bson_compare.h"
#include "bson/bson_iter.h"
#include "bson/bson_util.h"
#include "db/db_private.h"
#include "db/views.h"
#include "db/txn_participant.h"
#include "db/exec.h"
#include "db/storage_api.h"
#include "db/session_catalog.h"
#include "db/write_ops.h"
#include "session/session_args.h"
#include "net/command_args.h"
#include "net/message.h"
#include "query/update.h"

/* Documents per insert write unit (MongoDB's internalInsertMaxBatchSize is 64). */
#define INSERT_GROUP 64
/* MongoDB's BSONDepth::getMaxDepthForUserStorage(). */
#define MAX_USER_DEPTH 180

/* ---------------------------------------------------------------- documents */

static bool
depth_ok(const bson_t *doc, int depth)
{
    bson_iter_t it;
    if (!bson_iter_init(&it, doc)) {
        return true;
    }
    while (shl_iter_next(&it)) {
        if (BSON_ITER_HOLDS_DOCUMENT(&it) || BSON_ITER_HOLDS_ARRAY(&it)) {
            bson_t sub;
            const uint8_t *data;
            uint32_t len;
            if (depth >= MAX_USER_DEPTH) {
                return false;
            }
            if (BSON_ITER_HOLDS_DOCUMENT(&it)) {
                bson_iter_document(&it, &len, &data);
            } else {
                bson_iter_array(&it, &len, &data);
            }
            if (bson_init_static(&sub, data, len) && !depth_ok(&sub, depth + 1)) {
                return false;
            }
        }
    }
    return true;
}

int
db_doc_for_insert(shl_storage_engine_t *eng, const bson_t *doc, bson_t **out, shl_status_t *st)
{
    int ret = 0;
    bson_iter_t it;
    bool had_id = false, id_first = false, fix_ts = false, first = true;
    bson_t *fixed = NULL;

    *out = NULL;
    if (doc->len > SHL_MAX_BSON_SIZE) {
        SHL_FAIL(st, SHL_CODE_BAD_VALUE,
                 "object to insert too large. size in bytes: %u, max size: %d", doc->len,
                 SHL_MAX_BSON_SIZE);
    }
    if (!depth_ok(doc, 1)) {
        SHL_FAIL(st, SHL_CODE_OVERFLOW,
                 "cannot insert document because it exceeds %d levels of nesting", MAX_USER_DEPTH);
    }
    bson_iter_init(&it, doc);
    for (; shl_iter_next(&it); first = false) {
        const char *k = shl_iter_key(&it);
        if (BSON_ITER_HOLDS_TIMESTAMP(&it)) {
            uint32_t t, i;
            bson_iter_timestamp(&it, &t, &i);
            fix_ts = fix_ts || (t == 0 && i == 0);
        }
        if (strcmp(k, "_id") != 0) {
            continue;
        }
        if (BSON_ITER_HOLDS_REGEX(&it)) {
            SHL_FAIL(st, SHL_CODE_BAD_VALUE, "can't use a regex for _id");
        }
        if (BSON_ITER_HOLDS_UNDEFINED(&it)) {
            SHL_FAIL(st, SHL_CODE_BAD_VALUE, "can't use a undefined for _id");
        }
        if (BSON_ITER_HOLDS_ARRAY(&it)) {
            SHL_FAIL(st, SHL_CODE_BAD_VALUE, "can't use an array for _id");
        }
        if (shl_bson_value_dollar_key(bson_iter_value(&it)) != NULL) {
            /* At any depth (SERVER-75880). */
            SHL_FAIL(st, SHL_CODE_DOLLAR_PREFIXED_FIELD_NAME,
                     "_id fields may not contain '$'-prefixed fields: %s is not valid for storage.",
                     shl_bson_value_dollar_key(bson_iter_value(&it)));
        }
        if (had_id) {
            SHL_FAIL(st, SHL_CODE_BAD_VALUE, "can't have multiple _id fields in one document");
        }
        had_id = true;
        id_first = first;
    }
    if (id_first && !fix_ts) {
        goto done;
    }
    fixed = bson_sized_new(doc->len + 32);
    if (had_id) {
        bson_iter_init_find(&it, doc, "_id");
        bson_append_iter(fixed, "_id", 3, &it);
    } else {
        bson_oid_t oid;
        shl_bson_oid_gen(&oid);
        BSON_APPEND_OID(fixed, "_id", &oid);
    }
    bson_iter_init(&it, doc);
    while (shl_iter_next(&it)) {
        const char *k = shl_iter_key(&it);
        if (strcmp(k, "_id") == 0) {
            continue;
        }
        if (BSON_ITER_HOLDS_TIMESTAMP(&it)) {
            uint32_t t, i;
            bson_iter_timestamp(&it, &t, &i);
            if (t == 0 && i == 0) {
                /* MongoDB stamps a top-level Timestamp(0, 0) with a fresh cluster time. */
                uint64_t now = shl_storage_clock_now(eng) + 1;
                shl_storage_clock_advance(eng, now);
                db_append_ts(fixed, k, now);
                continue;
            }
        }
        bson_append_iter(fixed, k, -1, &it);
    }
    if (fixed->len > SHL_MAX_BSON_SIZE) {
        SHL_FAIL(st, SHL_CODE_BAD_VALUE,
                 "object to insert too large. size in bytes: %u, max size: %d", fixed->len,
                 SHL_MAX_BSON_SIZE);
    }
    *out = fixed;
    fixed = NULL;
done:
    if (fixed != NULL) {
        bson_destroy(fixed);
    }
    return ret;
}

int
db_doc_after_update(const bson_t *old_doc, const bson_t *new_doc, bson_t **out, shl_status_t *st)
{
    int ret = 0;
    bson_iter_t oi, ni, it;
    bool has_old, has_new, first_is_id;
    bson_t *fixed = NULL;

    *out = NULL;
    if (new_doc->len > SHL_MAX_BSON_SIZE) {
        SHL_FAIL(st, 17419, "Resulting document after update is larger than %d", SHL_MAX_BSON_SIZE);
    }
    has_old = bson_iter_init_find(&oi, old_doc, "_id");
    has_new = bson_iter_init_find(&ni, new_doc, "_id");
    if (has_old && has_new && !shl_bson_value_equal(bson_iter_value(&oi), bson_iter_value(&ni))) {
        char *v = shl_bson_value_to_string(bson_iter_value(&ni));
        shl_status_set(st, SHL_CODE_IMMUTABLE_FIELD,
                       "After applying the update, the (immutable) field '_id' was found to "
                       "have been altered to _id: %s",
                       v);
        bson_free(v);
        ret = SHL_CODE_IMMUTABLE_FIELD;
        goto done;
    }
    first_is_id =
        bson_iter_init(&it, new_doc) && shl_iter_next(&it) && strcmp(shl_iter_key(&it), "_id") == 0;
    if (first_is_id || (!has_old && !has_new)) {
        goto done;
    }
    fixed = bson_sized_new(new_doc->len + 32);
    if (has_new) {
        bson_append_iter(fixed, "_id", 3, &ni);
    } else {
        bson_append_iter(fixed, "_id", 3, &oi);
    }
    bson_iter_init(&it, new_doc);
    while (shl_iter_next(&it)) {
        if (strcmp(shl_iter_key(&it), "_id") != 0) {
            bson_append_iter(fixed, shl_iter_key(&it), -1, &it);
        }
    }
    if (fixed->len > SHL_MAX_BSON_SIZE) {
        SHL_FAIL(st, 17419, "Resulting document after update is larger than %d", SHL_MAX_BSON_SIZE);
    }
    *out = fixed;
    fixed = NULL;
done:
    if (fixed != NULL) {
        bson_destroy(fixed);
    }
    return ret;
}

int
db_ensure_collection(shl_op_ctx_t *op, const shl_ns_t *ns, shl_coll_handle_t *h, shl_status_t *st)
{
    int ret = 0;
    db_node_t *node = db_node(op);

    /* Storage cannot create-and-lock in one step (TODO(#3): ask storage for it), so a
     * drop may slip in between the create and the shared lock: create again. Bounded
     * by the operation's deadline and kill flag. */
    for (int attempt = 0;; attempt++) {
        uint64_t ts = 0;
        SHL_ERR(shl_storage_coll_acquire(node->eng, ns->full, SHL_LOCK_SHARED, h, st));
        if (h->coll != NULL) {
            break;
        }
        shl_storage_coll_release(h);
        SHL_ERR(shl_op_check_interrupt(op, st));
        if (attempt > 0) {
            shl_sleep_ms(attempt < 10 ? 0 : 1);
        }
        /* A transaction's implicit create is its own (its applyOps entry holds it; pending
         * in it until the commit, gone if it aborts). */
        ret = db_txn_storage(op) != NULL
                  ? shl_catalog_create_collection_in_txn(db_txn_storage(op), ns->full, NULL, st)
                  : shl_catalog_create_collection(node->eng, ns->full, NULL, NULL, &ts, st);
        if (ret == SHL_CODE_NAMESPACE_EXISTS) {
            ret = 0;
        } else if (ret == 0) {
            db_txn_note_created(op, ns->full);
        }
        SHL_ERR(ret);
        db_op_note_write_ts(ts);
    }
done:
    return ret;
}

/* Interruptions (maxTimeMS, killOp, shutdown) fail a write command as a whole. */
static bool
is_interruption(int code)
{
    return shl_code_in_category(code, SHL_CAT_INTERRUPTION);
}

/* A statement's error: what writeErrors reports. */
static void
add_error(shl_write_result_t *res, int32_t index, const shl_status_t *st)
{
    shl_write_result_add_error(res, index, st);
}

/* ---------------------------------------------------------------- insert */

static const char *const insert_fields[] = {"documents",
                                            "ordered",
                                            "bypassDocumentValidation",
                                            "collectionUUID",
                                            "isTimeseriesNamespace",
                                            "encryptionInformation",
                                            "stmtId",
                                            "stmtIds",
                                            DB_WCOS_INSERT_FIELD,
                                            NULL};

typedef struct insert_item {
    bson_t doc;       /* view of the request's document */
    bson_t *fixed;    /* owned when db_doc_for_insert rewrote it */
    shl_status_t err; /* when 'bad' */
    bool bad;
    bool retried; /* a retryable write's statement that already ran: not run again */
} insert_item_t;

static const bson_t *
item_doc(const insert_item_t *it)
{
    return it->fixed != NULL ? it->fixed : &it->doc;
}

/* One write unit over items [begin, end). */
typedef struct insert_unit {
    shl_op_ctx_t *op;
    const shl_collection_t *coll;
    insert_item_t *items;
    size_t begin, end;
    bool ordered;
    const db_validator_t *validator;
    const int32_t *stmt_ids; /* the items' statement ids (retryable writes) */
    db_stmt_recorder_t *rec; /* records them */
    /* Results of the last run (reset on every retry). */
    size_t done; /* items handled (inserted, or failed with a duplicate or validation) */
    size_t n_inserted;
    size_t *dup_idx; /* items that failed without writing (duplicate key, validation) */
    shl_status_t *dup_st;
    size_t n_dup;
    bool stop; /* ordered and an error */
} insert_unit_t;

/* A retryable internal transaction's inserts of the user's statements (db_txn_note_stmt):
 * the items of the last run of 'u' that were written. */
static void
note_inserted(const insert_unit_t *u, const char *ns, bool user_ids, bool moved)
{
    for (size_t i = u->begin; user_ids && db_txn_records_stmts(u->op) && i < u->begin + u->done;
         i++) {
        bool failed = false;
        bson_iter_t it;
        for (size_t d = 0; d < u->n_dup; d++) {
            failed = failed || u->dup_idx[d] == i;
        }
        if (!failed && bson_iter_init_find(&it, item_doc(&u->items[i]), "_id")) {
            bson_t answer = BSON_INITIALIZER, le;
            if (moved) {
                /* The new home of a document an update moved: a retry of that update sent
                 * here is answered as the update it was. */
                BSON_APPEND_UTF8(&answer, "k", "f");
                BSON_APPEND_DOCUMENT_BEGIN(&answer, "lastErrorObject", &le);
                BSON_APPEND_INT32(&le, "n", 1);
                BSON_APPEND_BOOL(&le, "updatedExisting", true);
                bson_append_document_end(&answer, &le);
                BSON_APPEND_DOCUMENT(&answer, "value", item_doc(&u->items[i]));
            } else {
                BSON_APPEND_UTF8(&answer, "k", "i");
                bson_append_iter(&answer, "_id", 3, &it);
                BSON_APPEND_DOCUMENT(&answer, "doc", item_doc(&u->items[i]));
            }
            BSON_APPEND_UTF8(&answer, "ns", ns);
            BSON_APPEND_DOCUMENT(&answer, "rdoc", item_doc(&u->items[i]));
            db_txn_note_stmt(u->op, u->stmt_ids[i], &answer);
            bson_destroy(&answer);
        }
    }
}

static int
insert_unit_fn(shl_storage_txn_t *txn, void *arg, shl_status_t *st)
{
    insert_unit_t *u = arg;
    int ret = 0;

    u->done = u->n_inserted = u->n_dup = 0;
    u->stop = false;
    db_stmt_recorder_begin(u->rec);
    for (size_t i = u->begin; i < u->end; i++) {
        bool invalid = db_validator_check(u->validator, NULL, item_doc(&u->items[i]), st) != 0;
        shl_write_opts_t wo;
        const shl_write_opts_t *wop = db_stmt_recorder_opts(u->rec, u->stmt_ids[i], &wo);
        ret = invalid ? st->code
                      : shl_doc_insert(txn, u->coll, item_doc(&u->items[i]), wop, NULL, st);
        if (ret == 0) {
            shl_db_sharding_observe_write(u->op, u->coll->ns, NULL, item_doc(&u->items[i]));
            db_stmt_recorder_wrote(u->rec, u->stmt_ids[i]);
        }
        if (ret == SHL_CODE_DUPLICATE_KEY || invalid) {
            /* Nothing of this insert stayed; the unit goes on (or stops, if ordered). */
            u->dup_idx[u->n_dup] = i;
            u->dup_st[u->n_dup] = *st;
            u->n_dup++;
            u->done++;
            ret = 0;
            if (u->ordered) {
                u->stop = true;
                break;
            }
            continue;
        }
        SHL_ERR(ret);
        u->n_inserted++;
        u->done++;
    }
    SHL_ERR(db_stmt_recorder_finish(u->rec, txn, st));
done:
    return ret;
}

static int
cmd_insert(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    int ret = 0;
    db_node_t *node = db_node(op);
    shl_ns_t ns;
    shl_write_concern_t wc;
    bson_t docs;
    bool found, ordered = true, locked = false, stop = false;
    bson_iter_t it;
    insert_item_t *items = NULL;
    size_t n = 0, cap;
    shl_write_result_t res;
    shl_coll_handle_t h;
    insert_unit_t u;
    shl_db_orphan_filter_t *filter = NULL;
    bool blocked;
    shl_status_t blocked_st = SHL_STATUS_INIT;
    db_validator_t validator;
    bool bypass = false, user_ids = false, moved = false;
    int32_t *stmt_ids = NULL;
    db_stmt_recorder_t rec;

    db_cmd_begin(op);
    shl_write_result_init(&res);
    db_stmt_recorder_init(&rec, op);
    memset(&u, 0, sizeof(u));
    memset(&validator, 0, sizeof(validator));
    u.op = op;
    u.validator = &validator;
    u.rec = &rec;
    SHL_ERR(shl_cmd_check_fields(cmd, insert_fields, st));
    SHL_ERR(db_ns_from_cmd(op, cmd, &ns, st));
    /* Held until the inserts are done: a shard counts the writes in flight by it (a
     * migration's critical section waits for them). */
    SHL_ERR(db_sharding_check_versions(op, ns.full, SHL_DB_SHARD_WRITE, &filter, st));
    SHL_ERR(db_check_write_ns(op, &ns, st));
    blocked = db_uwb_check(op, ns.full, &blocked_st) != 0;
    SHL_ERR(db_write_concern_get(op, &wc, st));
    SHL_ERR(shl_cmd_get_bool(cmd, "ordered", &ordered, st));
    SHL_ERR(shl_cmd_get_bool(cmd, "bypassDocumentValidation", &bypass, st));
    SHL_ERR(shl_cmd_get_array(cmd, "documents", &docs, &found, st));
    if (!found) {
        SHL_FAIL(st, SHL_CODE_IDL_FAILED_TO_PARSE,
                 "BSON field 'insert.documents' is missing but a required field");
    }
    cap = bson_count_keys(&docs);
    SHL_ERR(shl_write_batch_check("insert", "documents", (uint32_t)cap, st));
    items = bson_aligned_alloc0(BSON_ALIGNOF(insert_item_t), cap * sizeof(*items));
    bson_iter_init(&it, &docs);
    while (shl_iter_next(&it) && n < cap) {
        insert_item_t *item = &items[n++];
        const uint8_t *data;
        uint32_t len;
        if (!BSON_ITER_HOLDS_DOCUMENT(&it)) {
            SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH,
                     "BSON field 'insert.documents.%s' is the wrong type '%s', expected type "
                     "'object'",
                     shl_iter_key(&it), shl_bson_type_name(shl_iter_type(&it)));
        }
        bson_iter_document(&it, &len, &data);
        bson_init_static(&item->doc, data, len);
        if (blocked) {
            /* UserWritesBlocked is each statement's write error, as MongoDB reports it. */
            item->err = blocked_st;
            item->bad = true;
        } else if (db_doc_for_insert(node->eng, &item->doc, &item->fixed, &item->err) != 0) {
            item->bad = true;
        }
    }
    SHL_ERR(shl_session_stmt_ids(cmd, (uint32_t)n, &stmt_ids, st));
    user_ids = shl_bson_has_key(cmd, "stmtIds") || shl_bson_has_key(cmd, "stmtId");
    moved = shl_bson_has_key(cmd, DB_WCOS_INSERT_FIELD);
    /* A retried retryable write: the statements that ran are answered, not run again. */
    for (size_t i = 0; op->session != NULL && i < n; i++) {
        uint64_t ts = 0;
        SHL_ERR(db_session_stmt_executed(op, stmt_ids[i], &ts, &items[i].retried, st));
        if (items[i].retried) {
            res.n++;
            shl_write_result_add_retried(&res, stmt_ids[i]);
            db_op_note_write_ts(ts);
        }
    }
    /* ... or a retry as a new retryable internal transaction of a statement another attempt
     * of the user's write committed. */
    for (size_t i = 0; op->session == NULL && user_ids && db_txn_records_stmts(op) && i < n; i++) {
        bson_t answer;
        items[i].retried = db_session_child_answer(node->sessions, op, stmt_ids[i], &answer);
        bson_destroy(&answer);
        if (items[i].retried) {
            res.n++;
            shl_write_result_add_retried(&res, stmt_ids[i]);
        }
    }
    u.items = items;
    u.stmt_ids = stmt_ids;
    u.ordered = ordered;
    u.dup_idx = bson_malloc(INSERT_GROUP * sizeof(size_t));
    u.dup_st = bson_malloc(INSERT_GROUP * sizeof(shl_status_t));

    for (size_t i = 0; i < n && !stop;) {
        size_t j;
        uint64_t ts = 0;
        int rc;

        /* Interruptions fail the whole batch, as in MongoDB (not a writeError). */
        SHL_ERR(shl_op_check_interrupt(op, st));
        if (items[i].retried) {
            i++;
            continue;
        }
        if (items[i].bad) {
            add_error(&res, (int32_t)i, &items[i].err);
            stop = ordered;
            i++;
            continue;
        }
        if (!locked) {
            rc = db_ensure_collection(op, &ns, &h, st);
            if (rc != 0) {
                add_error(&res, (int32_t)i, st);
                break;
            }
            locked = true;
            SHL_ERR(db_validator_init(&validator, h.coll, bypass, st));
        }
        for (j = i; j < n && j - i < INSERT_GROUP && !items[j].bad && !items[j].retried; j++) {
        }
        u.coll = h.coll;
        u.begin = i;
        u.end = j;
        rc = db_write_retry(op, node->eng, insert_unit_fn, &u, &ts, st);
        if (rc == 0) {
            db_stmt_recorder_commit(&rec);
            db_op_note_write_ts(ts);
            note_inserted(&u, ns.full, user_ids, moved);
            res.n += (int64_t)u.n_inserted;
            for (size_t d = 0; d < u.n_dup; d++) {
                add_error(&res, (int32_t)u.dup_idx[d], &u.dup_st[d]);
            }
            stop = u.stop;
            i = u.begin + u.done; /* == j unless an ordered batch stopped */
            continue;
        }
        /* The group failed as a whole: redo it one document per unit, so the failing
         * document gets its own error and the others are written. */
        for (size_t k = i; k < j && !stop; k++) {
            u.begin = k;
            u.end = k + 1;
            ts = 0;
            rc = db_write_retry(op, node->eng, insert_unit_fn, &u, &ts, st);
            if (rc == 0) {
                db_stmt_recorder_commit(&rec);
                db_op_note_write_ts(ts);
                note_inserted(&u, ns.full, user_ids, moved);
                res.n += (int64_t)u.n_inserted;
                for (size_t d = 0; d < u.n_dup; d++) {
                    add_error(&res, (int32_t)u.dup_idx[d], &u.dup_st[d]);
                }
                stop = u.stop;
            } else if (is_interruption(rc)) {
                ret = rc;
                goto done;
            } else {
                add_error(&res, (int32_t)k, st);
                stop = ordered;
            }
        }
        i = j;
    }
    if (locked) {
        shl_storage_coll_release(&h);
        locked = false;
    }
    db_session_note_retried(op, res.n_retried);
    shl_write_result_append(&res, false, reply);
    db_write_concern_wait(op, &wc, reply);
done:
    if (locked) {
        shl_storage_coll_release(&h);
    }
    for (size_t i = 0; i < n; i++) {
        if (items[i].fixed != NULL) {
            bson_destroy(items[i].fixed);
        }
    }
    bson_free(items);
    bson_free(stmt_ids);
    db_stmt_recorder_cleanup(&rec);
    bson_free(u.dup_idx);
    bson_free(u.dup_st);
    db_validator_cleanup(&validator);
    shl_write_result_cleanup(&res);
    shl_db_orphan_filter_release(filter);
    return ret;
}

/* ---------------------------------------------------------------- update */

static const char *const update_fields[] = {"updates",
                                            "ordered",
                                            "bypassDocumentValidation",
                                            "let",
                                            "legacyRuntimeConstants",
                                            "collectionUUID",
                                            "isTimeseriesNamespace",
                                            "encryptionInformation",
                                            "stmtId",
                                            "stmtIds",
                                            NULL};

typedef struct update_unit {
    shl_op_ctx_t *op;
    shl_collection_t *coll;
    const char *ns;
    const shl_update_stmt_t *stmt;
    exec_query_t *q;
    shl_update_t *upd; /* its collator is set once the plan settles the query's */
    const db_validator_t *validator;
    int32_t stmt_id;
    db_stmt_recorder_t *rec;
    /* Results of the last run. */
    int64_t n_matched, n_modified;
    bool upserted;
    bson_value_t upserted_id;
} update_unit_t;

static void
update_unit_reset(update_unit_t *u)
{
    u->n_matched = u->n_modified = 0;
    if (u->upserted) {
        bson_value_destroy(&u->upserted_id);
    }
    u->upserted = false;
}

/* Apply the update to one matched document. */
static int
update_one_doc(update_unit_t *u, shl_storage_txn_t *txn, int64_t rid, const bson_t *doc,
               shl_status_t *st)
{
    int ret = 0;
    shl_update_ctx_t uctx;
    bson_t out, *fixed = NULL;
    bool changed = false, has_out = false;

    memset(&uctx, 0, sizeof(uctx));
    if (u->stmt->has_let) {
        uctx.vars = &u->stmt->let;
    }
    if (shl_update_uses_positional(u->upd)) {
        shl_match_details_t details;
        bool matched;
        memset(&details, 0, sizeof(details));
        SHL_ERR(shl_matcher_match(u->q->matcher, doc, &details, &matched, st));
        uctx.has_matched_key = details.has_key;
        uctx.matched_key = details.key;
    }
    ret = shl_update_apply(u->upd, doc, &uctx, &out, &changed, st);
    has_out = true;
    SHL_ERR(ret);
    u->n_matched++;
    if (changed) {
        SHL_ERR(db_doc_after_update(doc, &out, &fixed, st));
        SHL_ERR(shl_db_check_shard_key_update(u->op, u->q->orphan_filter, u->stmt->multi, doc,
                                              fixed != NULL ? fixed : &out, st));
        SHL_ERR(db_validator_check(u->validator, doc, fixed != NULL ? fixed : &out, st));
        {
            shl_write_opts_t wo;
            bson_t dk = BSON_INITIALIZER;
            const shl_write_opts_t *wop = db_stmt_recorder_opts(u->rec, u->stmt_id, &wo);
            if (shl_update_get_kind(u->upd) != SHL_UPDATE_REPLACEMENT) {
                /* Change streams report an update, not a replace. */
                if (wop == NULL) {
                    memset(&wo, 0, sizeof(wo));
                    wop = &wo;
                }
                wo.describe_update = true;
                /* The $v:2 entry's o2 is the documentKey. */
                wop = shl_db_delete_opts(u->op, u->coll->ns, fixed != NULL ? fixed : &out, wop,
                                         &wo, &dk);
            }
            ret = shl_doc_update(txn, u->coll, rid, doc, fixed != NULL ? fixed : &out, wop, st);
            bson_destroy(&dk);
            SHL_ERR(ret);
        }
        db_stmt_recorder_wrote(u->rec, u->stmt_id);
        shl_db_sharding_observe_write(u->op, u->coll->ns, doc, fixed != NULL ? fixed : &out);
        u->n_modified++;
    }
done:
    if (has_out) {
        bson_destroy(&out);
    }
    if (fixed != NULL) {
        bson_destroy(fixed);
    }
    return ret;
}

static int
update_unit_fn(shl_storage_txn_t *txn, void *arg, shl_status_t *st)
{
    update_unit_t *u = arg;
    int ret = 0;
    exec_plan_t *plan = NULL;
    bson_t *copy = NULL;

    update_unit_reset(u);
    db_stmt_recorder_begin(u->rec);
    u->q->limit = u->stmt->multi ? 0 : 1;
    SHL_ERR(exec_plan_build(shl_storage_txn_engine(txn), txn, 0, u->coll, u->ns, u->q, &plan, st));
    /* The plan settled the query's collation (the command's or the collection's default);
     * the update operators compare under the same one. */
    shl_update_set_collator(u->upd, u->q->collator);
    for (;;) {
        exec_row_t row;
        bool eof;
        SHL_ERR(exec_plan_next(plan, u->op, &row, &eof, st));
        if (eof) {
            break;
        }
        /* The row is a view into the scan's cursor; keep a copy across the write. */
        copy = bson_copy(row.doc);
        SHL_ERR(update_one_doc(u, txn, row.rid, copy, st));
        bson_destroy(copy);
        copy = NULL;
    }
    exec_plan_destroy(plan);
    plan = NULL;
    if (u->n_matched == 0 && u->stmt->upsert) {
        shl_update_ctx_t uctx;
        bson_t newdoc, *fixed = NULL;
        bson_iter_t it;

        memset(&uctx, 0, sizeof(uctx));
        uctx.is_insert = true;
        if (u->stmt->has_let) {
            uctx.vars = &u->stmt->let;
        }
        ret = shl_update_upsert_doc(u->upd, u->q->matcher, &uctx, &newdoc, st);
        if (ret == 0) {
            ret = db_doc_for_insert(shl_storage_txn_engine(txn), &newdoc, &fixed, st);
        }
        if (ret == 0) {
            const bson_t *ins = fixed != NULL ? fixed : &newdoc;
            ret = shl_db_check_upsert_owned(u->op, u->q->orphan_filter, ins, st);
            if (ret == 0) {
                ret = db_validator_check(u->validator, NULL, ins, st);
            }
            if (ret == 0) {
                shl_write_opts_t wo;
                const shl_write_opts_t *wop = db_stmt_recorder_opts(u->rec, u->stmt_id, &wo);
                ret = shl_doc_insert(txn, u->coll, ins, wop, NULL, st);
            }
            if (ret == 0) {
                db_stmt_recorder_wrote(u->rec, u->stmt_id);
                shl_db_sharding_observe_write(u->op, u->coll->ns, NULL, ins);
            }
            if (ret == 0 && bson_iter_init_find(&it, ins, "_id")) {
                bson_value_copy(bson_iter_value(&it), &u->upserted_id);
                u->upserted = true;
            }
        }
        bson_destroy(&newdoc);
        if (fixed != NULL) {
            bson_destroy(fixed);
        }
        SHL_ERR(ret);
    }
    SHL_ERR(db_stmt_recorder_finish(u->rec, txn, st));
done:
    if (copy != NULL) {
        bson_destroy(copy);
    }
    exec_plan_destroy(plan);
    return ret;
}

static int
bson_value_of(const bson_t *doc, bool array, bson_value_t *v)
{
    memset(v, 0, sizeof(*v));
    v->value_type = array ? BSON_TYPE_ARRAY : BSON_TYPE_DOCUMENT;
    v->value.v_doc.data = (uint8_t *)(uintptr_t)bson_get_data(doc);
    v->value.v_doc.data_len = doc->len;
    return 0;
}

/* The query of an update or delete statement: its filter, collation check and hint. */
static int
stmt_query_init(exec_query_t *q, const bson_t *filter, const bson_t *collation,
                const bson_value_t *hint, const bson_t *vars, shl_status_t *st)
{
    int ret = 0;

    SHL_ERR(exec_query_init(q, filter, NULL, NULL, st));
    if (collation != NULL) {
        bson_t wrap = BSON_INITIALIZER;
        BSON_APPEND_DOCUMENT(&wrap, "collation", collation);
        ret = db_query_collation(&wrap, "collation", q, st);
        bson_destroy(&wrap);
        SHL_ERR(ret);
    }
    if (vars != NULL) {
        shl_matcher_bind_vars(q->matcher, vars);
    }
    q->has_hint = hint != NULL;
    if (hint != NULL) {
        q->hint = *hint;
    }
done:
    return ret;
}

/* Run one update statement; its outcome goes into 'res'. */
static int
run_update_stmt(shl_op_ctx_t *op, const shl_ns_t *ns, const shl_update_stmt_t *stmt, int32_t index,
                int32_t stmt_id, bool bypass, shl_db_orphan_filter_t *filter,
                shl_write_result_t *res, shl_status_t *st)
{
    int ret = 0;
    db_node_t *node = db_node(op);
    exec_query_t q;
    shl_update_t *upd = NULL;
    bson_value_t uval;
    shl_coll_handle_t h;
    bool locked = false;
    update_unit_t u;
    uint64_t ts = 0;
    db_validator_t validator;
    db_stmt_recorder_t rec;

    memset(&q, 0, sizeof(q));
    memset(&u, 0, sizeof(u));
    memset(&validator, 0, sizeof(validator));
    db_stmt_recorder_init(&rec, op);
    if (stmt->multi && op->session != NULL) {
        SHL_FAIL(st, SHL_CODE_INVALID_OPTIONS,
                 "Cannot use (or request) retryable writes with multi=true");
    }
    SHL_ERR(stmt_query_init(&q, &stmt->q, stmt->has_collation ? &stmt->collation : NULL,
                            stmt->has_hint ? &stmt->hint : NULL,
                            stmt->has_let ? &stmt->let : NULL, st));
    /* A versioned update leaves orphans alone, as MongoDB's write stages do. */
    q.orphan_filter = shl_db_orphan_filter_ref(filter);
    bson_value_of(&stmt->u, stmt->u_pipeline, &uval);
    SHL_ERR(shl_update_new(&uval, stmt->has_array_filters ? &stmt->array_filters : NULL, &upd, st));
    if (stmt->upsert) {
        SHL_ERR(db_ensure_collection(op, ns, &h, st));
    } else {
        SHL_ERR(shl_storage_coll_acquire(node->eng, ns->full, SHL_LOCK_SHARED, &h, st));
    }
    locked = true;
    if (h.coll == NULL) {
        goto done; /* nothing to update */
    }
    SHL_ERR(db_validator_init(&validator, h.coll, bypass, st));
    u.op = op;
    u.coll = h.coll;
    u.ns = ns->full;
    u.stmt = stmt;
    u.q = &q;
    u.upd = upd;
    u.validator = &validator;
    u.stmt_id = stmt_id;
    u.rec = &rec;
    ret = db_write_retry(op, node->eng, update_unit_fn, &u, &ts, st);
    if (ret == SHL_CODE_DUPLICATE_KEY && stmt->upsert) {
        /* Two upserts raced to insert the same key: the loser now finds the winner's
         * document and updates it, as MongoDB retries such upserts. */
        ret = db_write_retry(op, node->eng, update_unit_fn, &u, &ts, st);
    }
    SHL_ERR(ret);
    db_stmt_recorder_commit(&rec);
    db_op_note_write_ts(ts);
    res->n += u.n_matched + (u.upserted ? 1 : 0);
    res->n_modified += u.n_modified;
    if (u.upserted) {
        shl_write_result_add_upserted(res, index, &u.upserted_id);
    }
done:
    if (locked) {
        shl_storage_coll_release(&h);
    }
    update_unit_reset(&u);
    db_stmt_recorder_cleanup(&rec);
    db_validator_cleanup(&validator);
    shl_update_destroy(upd);
    exec_query_cleanup(&q);
    return ret;
}

/*
 * What differs between the update and delete commands: their names, fields and how one
 * statement is parsed and run. Everything else about a batch is shared (run_batch).
 */
typedef struct stmt_kind {
    const char *cmd;           /* "update" */
    const char *field;         /* "updates" */
    const char *const *fields; /* the command's own fields */
    size_t stmt_size;
    size_t stmt_align;
    bool is_update;
    int (*parse)(const bson_t *doc, void *stmt, shl_status_t *st);
    /* Give a parsed statement the command's `let` variables (a view of 'vars'). */
    void (*set_let)(void *stmt, const bson_t *vars);
    int (*run)(shl_op_ctx_t *op, const shl_ns_t *ns, const void *stmt, int32_t index,
               int32_t stmt_id, bool bypass, shl_db_orphan_filter_t *filter,
               shl_write_result_t *res, shl_status_t *st);
} stmt_kind_t;

/*
 * The result of statement 'index' of a retried retryable write, as MongoDB rebuilds it: a
 * delete deleted one document; an update is read from its oplog entry at 'ts' (an insert
 * entry is its upsert, an update entry one modified document).
 */
static int
retried_result(shl_op_ctx_t *op, bool is_update, int32_t index, int32_t stmt_id, uint64_t ts,
               shl_write_result_t *res, shl_status_t *st)
{
    int ret = 0;
    bson_t entry = BSON_INITIALIZER, o;
    bson_iter_t it;
    const char *kind = "d";

    if (is_update) {
        bson_destroy(&entry);
        SHL_ERR(db_session_read_entry(op, ts, &entry, st));
    }
    if (bson_iter_init_find(&it, &entry, "op") && BSON_ITER_HOLDS_UTF8(&it)) {
        kind = bson_iter_utf8(&it, NULL);
    }
    res->n++;
    if (is_update && strcmp(kind, "u") == 0) {
        res->n_modified++;
    } else if (is_update && strcmp(kind, "i") == 0 && shl_bson_get_subdoc(&entry, "o", &o) &&
               bson_iter_init_find(&it, &o, "_id")) {
        shl_write_result_add_upserted(res, index, bson_iter_value(&it));
    } else if (is_update) {
        SHL_FAIL(st, 40638,
                 "update retry request is not compatible with previous write in the transaction "
                 "of type: %s",
                 kind);
    }
    shl_write_result_add_retried(res, stmt_id);
    db_op_note_write_ts(ts);
done:
    bson_destroy(&entry);
    return ret;
}

/*
 * The result of statement 'index' ('stmt_id') answered from a retryable internal transaction
 * of the user's write (db_txn_note_stmt's answer): a findAndModify's stands for the update
 * that moved its document to another shard (WouldChangeOwningShard) or for a findAndModify
 * retried as a write.
 */
static int
answer_result(bool is_update, int32_t index, int32_t stmt_id, const bson_t *answer,
              shl_write_result_t *res, shl_status_t *st)
{
    bson_iter_t it;
    const char *k = "";
    int64_t n = 1;
    int ret = 0;

    if (bson_iter_init_find(&it, answer, "k") && BSON_ITER_HOLDS_UTF8(&it)) {
        k = bson_iter_utf8(&it, NULL);
    }
    if (strcmp(k, "f") == 0) {
        n = bson_iter_init(&it, answer) && bson_iter_find_descendant(&it, "lastErrorObject.n", &it)
                ? bson_iter_as_int64(&it)
                : 0;
    }
    if (is_update && strcmp(k, "i") == 0 && bson_iter_init_find(&it, answer, "_id")) {
        res->n++;
        shl_write_result_add_upserted(res, index, bson_iter_value(&it));
    } else if (is_update && (strcmp(k, "u") == 0 || strcmp(k, "f") == 0)) {
        res->n += n;
        res->n_modified += n;
    } else if (!is_update && (strcmp(k, "d") == 0 || strcmp(k, "f") == 0)) {
        res->n += n;
    } else {
        SHL_FAIL(st, 40638,
                 "%s retry request is not compatible with previous write in the transaction",
                 is_update ? "update" : "delete");
    }
    shl_write_result_add_retried(res, stmt_id);
done:
    return ret;
}

/* What a retry of statement 'stmt_id', which just ran, is to answer (txn_participant.h). */
static void
note_answer(const shl_op_ctx_t *op, bool is_update, int32_t stmt_id, const shl_write_result_t *res,
            int64_t n_before, int64_t mod_before, uint32_t ups_before)
{
    bson_t answer = BSON_INITIALIZER;
    bson_iter_t it, e;
    char key[16];
    const char *k;

    if (res->n_upserted > ups_before) {
        bson_uint32_to_string(res->n_upserted - 1, &k, key, sizeof(key));
        if (bson_iter_init_find(&it, &res->upserted, k) && bson_iter_recurse(&it, &e) &&
            bson_iter_find(&e, "_id")) {
            BSON_APPEND_UTF8(&answer, "k", "i");
            bson_append_iter(&answer, "_id", 3, &e);
        }
    } else if (is_update && res->n_modified > mod_before) {
        BSON_APPEND_UTF8(&answer, "k", "u");
    } else if (!is_update && res->n > n_before) {
        BSON_APPEND_UTF8(&answer, "k", "d");
    }
    if (!bson_empty(&answer)) {
        db_txn_note_stmt(op, stmt_id, &answer);
    }
    bson_destroy(&answer);
}

/* Parse every statement first (a malformed one fails the whole command, as MongoDB's IDL
 * does), then run them in order: ordered batches stop at the first failure. */
static int
run_batch(shl_op_ctx_t *op, const bson_t *cmd, const stmt_kind_t *kind, bson_t *reply,
          shl_status_t *st)
{
    int ret = 0;
    shl_ns_t ns;
    shl_write_concern_t wc;
    bson_t stmts;
    bool found, ordered = true, bypass = false;
    bson_iter_t it;
    shl_write_result_t res;
    uint8_t *parsed = NULL;
    size_t n = 0, cap;
    shl_db_orphan_filter_t *filter = NULL;
    bool blocked;
    shl_status_t blocked_st = SHL_STATUS_INIT;
    int32_t *stmt_ids = NULL;
    bson_t vars = BSON_INITIALIZER;
    bool has_vars = false, user_ids;
    db_node_t *node = db_node(op);

    db_cmd_begin(op);
    shl_write_result_init(&res);
    SHL_ERR(shl_cmd_check_fields(cmd, kind->fields, st));
    SHL_ERR(db_ns_from_cmd(op, cmd, &ns, st));
    SHL_ERR(db_sharding_check_versions(op, ns.full, SHL_DB_SHARD_WRITE, &filter, st));
    SHL_ERR(db_check_write_ns(op, &ns, st));
    blocked = db_uwb_check(op, ns.full, &blocked_st) != 0;
    SHL_ERR(db_write_concern_get(op, &wc, st));
    SHL_ERR(shl_cmd_get_bool(cmd, "ordered", &ordered, st));
    SHL_ERR(shl_cmd_get_bool(cmd, "bypassDocumentValidation", &bypass, st));
    /* $$NOW is one value for all the statements, with or without `let`. */
    SHL_ERR(db_let_vars(op, cmd, true, &vars, &has_vars, st));
    SHL_ERR(shl_cmd_get_array(cmd, kind->field, &stmts, &found, st));
    if (!found) {
        SHL_FAIL(st, SHL_CODE_IDL_FAILED_TO_PARSE,
                 "BSON field '%s.%s' is missing but a required field", kind->cmd, kind->field);
    }
    cap = bson_count_keys(&stmts);
    SHL_ERR(shl_write_batch_check(kind->cmd, kind->field, (uint32_t)cap, st));
    parsed = bson_aligned_alloc0(kind->stmt_align, cap * kind->stmt_size);
    bson_iter_init(&it, &stmts);
    while (shl_iter_next(&it) && n < cap) {
        bson_t doc;
        const uint8_t *data;
        uint32_t len;
        if (!BSON_ITER_HOLDS_DOCUMENT(&it)) {
            SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH,
                     "BSON field '%s.%s.%s' is the wrong type '%s', expected type 'object'",
                     kind->cmd, kind->field, shl_iter_key(&it),
                     shl_bson_type_name(shl_iter_type(&it)));
        }
        bson_iter_document(&it, &len, &data);
        bson_init_static(&doc, data, len);
        SHL_ERR(kind->parse(&doc, parsed + n * kind->stmt_size, st));
        if (has_vars) {
            kind->set_let(parsed + n * kind->stmt_size, &vars);
        }
        n++;
    }
    SHL_ERR(shl_session_stmt_ids(cmd, (uint32_t)n, &stmt_ids, st));
    /* In a retryable internal transaction, the statements that carry the user's ids. */
    user_ids = shl_bson_has_key(cmd, "stmtIds") || shl_bson_has_key(cmd, "stmtId");
    for (size_t i = 0; i < n; i++) {
        shl_status_t err = SHL_STATUS_INIT;
        uint64_t ts = 0;
        bool executed = false;
        int64_t n_before = res.n, mod_before = res.n_modified;
        uint32_t ups_before = res.n_upserted;
        bson_t answer = BSON_INITIALIZER;
        SHL_ERR(shl_op_check_interrupt(op, st));
        /* A retried retryable write: a statement that ran -- itself, or in a retryable
         * internal transaction of the user's write -- is answered, not run again. */
        executed = (user_ids || op->session != NULL) &&
                   db_session_child_answer(node->sessions, op, stmt_ids[i], &answer);
        if (!executed && user_ids && db_txn_records_stmts(op)) {
            bson_destroy(&answer);
            ret = db_session_parent_answer(node->sessions, op, stmt_ids[i], false, &answer,
                                           &executed, st);
        }
        if (ret == 0 && executed) {
            ret = answer_result(kind->is_update, (int32_t)i, stmt_ids[i], &answer, &res, st);
        }
        bson_destroy(&answer);
        SHL_ERR(ret);
        if (executed) {
            continue;
        }
        SHL_ERR(db_session_stmt_executed(op, stmt_ids[i], &ts, &executed, st));
        if (executed) {
            SHL_ERR(retried_result(op, kind->is_update, (int32_t)i, stmt_ids[i], ts, &res, st));
            continue;
        }
        if (blocked) {
            /* UserWritesBlocked is each statement's write error, as MongoDB reports it. */
            add_error(&res, (int32_t)i, &blocked_st);
            if (ordered) {
                break;
            }
            continue;
        }
        if (kind->run(op, &ns, parsed + i * kind->stmt_size, (int32_t)i, stmt_ids[i], bypass,
                      filter, &res, &err) == 0) {
            if (user_ids && db_txn_records_stmts(op)) {
                note_answer(op, kind->is_update, stmt_ids[i], &res, n_before, mod_before,
                            ups_before);
            }
        } else {
            if (is_interruption(err.code)) {
                *st = err;
                ret = err.code;
                goto done;
            }
            add_error(&res, (int32_t)i, &err);
            if (ordered) {
                break;
            }
        }
    }
    db_session_note_retried(op, res.n_retried);
    shl_write_result_append(&res, kind->is_update, reply);
    db_write_concern_wait(op, &wc, reply);
done:
    shl_db_orphan_filter_release(filter);
    bson_free(parsed);
    bson_free(stmt_ids);
    shl_write_result_cleanup(&res);
    bson_destroy(&vars);
    return ret;
}

static int
parse_update(const bson_t *doc, void *stmt, shl_status_t *st)
{
    return shl_update_stmt_parse(doc, stmt, st);
}

static int
run_update(shl_op_ctx_t *op, const shl_ns_t *ns, const void *stmt, int32_t index, int32_t stmt_id,
           bool bypass, shl_db_orphan_filter_t *filter, shl_write_result_t *res, shl_status_t *st)
{
    return run_update_stmt(op, ns, stmt, index, stmt_id, bypass, filter, res, st);
}

static void
set_update_let(void *stmt, const bson_t *vars)
{
    shl_update_stmt_t *u = stmt;
    /* A statement's own "c" constants win (they come from $merge's own let). */
    if (!u->has_let) {
        bson_init_static(&u->let, bson_get_data(vars), vars->len);
        u->has_let = true;
    }
}

static const stmt_kind_t update_kind = {
    "update",
    "updates",
    update_fields,
    sizeof(shl_update_stmt_t),
    BSON_ALIGNOF(shl_update_stmt_t),
    true,
    parse_update,
    set_update_let,
    run_update,
};

static int
cmd_update(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    return run_batch(op, cmd, &update_kind, reply, st);
}

/* ---------------------------------------------------------------- delete */

static const char *const delete_fields[] = {
    "deletes", "ordered", "let", "legacyRuntimeConstants", "collectionUUID",
    "isTimeseriesNamespace", "encryptionInformation", "stmtId", "stmtIds", NULL};

typedef struct delete_unit {
    shl_op_ctx_t *op;
    shl_collection_t *coll;
    const char *ns;
    exec_query_t *q;
    int32_t stmt_id;
    db_stmt_recorder_t *rec;
    int64_t n; /* documents deleted by the last run */
} delete_unit_t;

static int
delete_unit_fn(shl_storage_txn_t *txn, void *arg, shl_status_t *st)
{
    delete_unit_t *u = arg;
    int ret = 0;
    exec_plan_t *plan = NULL;

    u->n = 0;
    db_stmt_recorder_begin(u->rec);
    SHL_ERR(exec_plan_build(shl_storage_txn_engine(txn), txn, 0, u->coll, u->ns, u->q, &plan, st));
    for (;;) {
        exec_row_t row;
        bool eof;
        shl_write_opts_t wo;
        const shl_write_opts_t *wop;
        SHL_ERR(exec_plan_next(plan, u->op, &row, &eof, st));
        if (eof) {
            break;
        }
        bson_t key;
        wop = db_stmt_recorder_opts(u->rec, u->stmt_id, &wo);
        wop = shl_db_delete_opts(u->op, u->coll->ns, row.doc, wop, &wo, &key);
        ret = shl_doc_delete(txn, u->coll, row.rid, row.doc, wop, st);
        bson_destroy(&key);
        SHL_ERR(ret);
        db_stmt_recorder_wrote(u->rec, u->stmt_id);
        shl_db_sharding_observe_write(u->op, u->coll->ns, row.doc, NULL);
        u->n++;
    }
    SHL_ERR(db_stmt_recorder_finish(u->rec, txn, st));
done:
    exec_plan_destroy(plan);
    return ret;
}

static int
run_delete_stmt(shl_op_ctx_t *op, const shl_ns_t *ns, const shl_delete_stmt_t *stmt,
                int32_t stmt_id, shl_db_orphan_filter_t *filter, shl_write_result_t *res,
                shl_status_t *st)
{
    int ret = 0;
    db_node_t *node = db_node(op);
    exec_query_t q;
    shl_coll_handle_t h;
    bool locked = false;
    delete_unit_t u;
    uint64_t ts = 0;
    db_stmt_recorder_t rec;

    memset(&q, 0, sizeof(q));
    db_stmt_recorder_init(&rec, op);
    if (stmt->limit == 0 && op->session != NULL) {
        SHL_FAIL(st, SHL_CODE_INVALID_OPTIONS,
                 "Cannot use (or request) retryable writes with limit=0");
    }
    SHL_ERR(stmt_query_init(&q, &stmt->q, stmt->has_collation ? &stmt->collation : NULL,
                            stmt->has_hint ? &stmt->hint : NULL,
                            stmt->has_let ? &stmt->let : NULL, st));
    q.limit = stmt->limit;
    q.orphan_filter = shl_db_orphan_filter_ref(filter);
    SHL_ERR(shl_storage_coll_acquire(node->eng, ns->full, SHL_LOCK_SHARED, &h, st));
    locked = true;
    if (h.coll == NULL) {
        goto done;
    }
    u.op = op;
    u.coll = h.coll;
    u.ns = ns->full;
    u.q = &q;
    u.n = 0;
    u.stmt_id = stmt_id;
    u.rec = &rec;
    SHL_ERR(db_write_retry(op, node->eng, delete_unit_fn, &u, &ts, st));
    db_stmt_recorder_commit(&rec);
    db_op_note_write_ts(ts);
    res->n += u.n;
done:
    if (locked) {
        shl_storage_coll_release(&h);
    }
    db_stmt_recorder_cleanup(&rec);
    exec_query_cleanup(&q);
    return ret;
}

static int
parse_delete(const bson_t *doc, void *stmt, shl_status_t *st)
{
    return shl_delete_stmt_parse(doc, stmt, st);
}

static int
run_delete(shl_op_ctx_t *op, const shl_ns_t *ns, const void *stmt, int32_t index, int32_t stmt_id,
           bool bypass, shl_db_orphan_filter_t *filter, shl_write_result_t *res, shl_status_t *st)
{
    (void)index;
    (void)bypass; /* deletes are never validated */
    return run_delete_stmt(op, ns, stmt, stmt_id, filter, res, st);
}

static void
set_delete_let(void *stmt, const bson_t *vars)
{
    shl_delete_stmt_t *d = stmt;
    bson_init_static(&d->let, bson_get_data(vars), vars->len);
    d->has_let = true;
}

static const stmt_kind_t delete_kind = {
    "delete",
    "deletes",
    delete_fields,
    sizeof(shl_delete_stmt_t),
    BSON_ALIGNOF(shl_delete_stmt_t),
    false,
    parse_delete,
    set_delete_let,
    run_delete,
};

static int
cmd_delete(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    return run_batch(op, cmd, &delete_kind, reply, st);
}

static const shl_command_t write_commands[] = {
    {"insert",
     {NULL},
     cmd_insert,
     SHL_CMD_NEEDS_PRIMARY | SHL_CMD_WRITE | SHL_CMD_IN_TXN | SHL_CMD_RETRYABLE_WRITE,
     "insert documents"},
    {"update",
     {NULL},
     cmd_update,
     SHL_CMD_NEEDS_PRIMARY | SHL_CMD_WRITE | SHL_CMD_IN_TXN | SHL_CMD_RETRYABLE_WRITE,
     "update documents"},
    {"delete",
     {NULL},
     cmd_delete,
     SHL_CMD_NEEDS_PRIMARY | SHL_CMD_WRITE | SHL_CMD_IN_TXN | SHL_CMD_RETRYABLE_WRITE,
     "delete documents"},
};

void
db_register_write_commands(shl_command_registry_t *reg)
{
    for (size_t i = 0; i < sizeof(write_commands) / sizeof(write_commands[0]); i++) {
        shl_command_registry_add(reg, &write_commands[i]);
    }
    db_register_fam_commands(reg);
}
