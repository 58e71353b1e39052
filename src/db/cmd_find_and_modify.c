/*
 * cmd_find_and_modify.c -- findAndModify (alias findandmodify): find the first document
 * of query+sort and update or remove it in one write unit, returning the document before
 * or after ('new') with 'fields' projected; upsert with implicit collection creation.
 * Reply: {lastErrorObject: {n, updatedExisting, upserted}, value}, as MongoDB 7.0.
 */
#include <string.h>

#include "bson/bson_util.h"
#include "db/db_private.h"
#include "db/views.h"
#include "db/exec.h"
#include "db/session_catalog.h"
#include "db/txn_participant.h"
#include "db/storage_api.h"
#include "net/command_args.h"
#include "session/session_args.h"
#include "query/update.h"

static const char *const fam_fields[] = {"query",
                                         "fields",
                                         "sort",
                                         "hint",
                                         "collation",
                                         "arrayFilters",
                                         "remove",
                                         "update",
                                         "new",
                                         "upsert",
                                         "bypassDocumentValidation",
                                         "let",
                                         "collectionUUID",
                                         "isTimeseriesNamespace",
                                         "encryptionInformation",
                                         "stmtId",
                                         DB_WCOS_INSERT_FIELD,
                                         NULL};

typedef struct fam_unit {
    shl_op_ctx_t *op;
    shl_collection_t *coll;
    const char *ns;
    exec_query_t *q;
    shl_update_t *upd; /* NULL for remove */
    const db_validator_t *validator;
    bool remove, return_new, upsert;
    int32_t stmt_id;
    db_stmt_recorder_t *rec;
    const bson_t *vars; /* the command's `let` variables, or NULL */
    /* Results of the last run. */
    bool found, updated_existing, upserted;
    bson_t *value; /* the document to return (before projection), or NULL */
    bson_value_t upserted_id;
} fam_unit_t;

static void
fam_reset(fam_unit_t *u)
{
    if (u->value != NULL) {
        bson_destroy(u->value);
    }
    if (u->upserted) {
        bson_value_destroy(&u->upserted_id);
    }
    u->value = NULL;
    u->found = u->updated_existing = u->upserted = false;
}

/*
 * Apply the update to the matched document 'pre' (record 'rid'), or, when 'pre' is NULL,
 * build and insert the upsert document: one path for both, so the new document is
 * produced, completed (_id first, generated _id) and written the same way, and the
 * value to return is chosen by one rule (the new document when 'new', else 'pre').
 */
static int
fam_write_doc(fam_unit_t *u, shl_storage_txn_t *txn, int64_t rid, const bson_t *pre,
              shl_status_t *st)
{
    int ret = 0;
    shl_update_ctx_t uctx;
    bson_t out, *fixed = NULL;
    const bson_t *doc;
    bool changed = true, has_out = false;

    memset(&uctx, 0, sizeof(uctx));
    uctx.vars = u->vars;
    if (pre == NULL) {
        uctx.is_insert = true;
        ret = shl_update_upsert_doc(u->upd, u->q->matcher, &uctx, &out, st);
        has_out = true;
        SHL_ERR(ret);
        SHL_ERR(db_doc_for_insert(shl_storage_txn_engine(txn), &out, &fixed, st));
    } else {
        if (shl_update_uses_positional(u->upd)) {
            shl_match_details_t details;
            bool matched;
            memset(&details, 0, sizeof(details));
            SHL_ERR(shl_matcher_match(u->q->matcher, pre, &details, &matched, st));
            uctx.has_matched_key = details.has_key;
            uctx.matched_key = details.key;
        }
        ret = shl_update_apply(u->upd, pre, &uctx, &out, &changed, st);
        has_out = true;
        SHL_ERR(ret);
        u->updated_existing = true;
        if (changed) {
            SHL_ERR(db_doc_after_update(pre, &out, &fixed, st));
        }
    }
    doc = fixed != NULL ? fixed : &out;
    if (pre == NULL) {
        SHL_ERR(shl_db_check_upsert_owned(u->op, u->q->orphan_filter, doc, st));
    } else if (changed) {
        SHL_ERR(shl_db_check_shard_key_update(u->op, u->q->orphan_filter, false, pre, doc, st));
    }
    if (pre == NULL || changed) {
        SHL_ERR(db_validator_check(u->validator, pre, doc, st));
    }
    if (pre == NULL) {
        bson_iter_t it;
        shl_write_opts_t wo;
        /* A retry answers an upsert from its insert entry: no image needed. */
        const shl_write_opts_t *wop = db_stmt_recorder_opts(u->rec, u->stmt_id, &wo);
        SHL_ERR(shl_doc_insert(txn, u->coll, doc, wop, NULL, st));
        db_stmt_recorder_wrote(u->rec, u->stmt_id);
        shl_db_sharding_observe_write(u->op, u->coll->ns, NULL, doc);
        if (bson_iter_init_find(&it, doc, "_id")) {
            bson_value_copy(bson_iter_value(&it), &u->upserted_id);
            u->upserted = true;
        }
    } else if (changed) {
        shl_write_opts_t wo;
        bson_t dk = BSON_INITIALIZER;
        const char *kind = u->return_new ? "postImage" : "preImage";
        const shl_write_opts_t *wop = db_stmt_recorder_opts_image(u->rec, u->stmt_id, kind, &wo);
        if (shl_update_get_kind(u->upd) != SHL_UPDATE_REPLACEMENT) {
            /* Change streams report an update, not a replace. */
            if (wop == NULL) {
                memset(&wo, 0, sizeof(wo));
                wop = &wo;
            }
            wo.describe_update = true;
            /* The $v:2 entry's o2 is the documentKey. */
            wop = shl_db_delete_opts(u->op, u->coll->ns, doc, wop, &wo, &dk);
        }
        ret = shl_doc_update(txn, u->coll, rid, pre, doc, wop, st);
        bson_destroy(&dk);
        SHL_ERR(ret);
        db_stmt_recorder_wrote(u->rec, u->stmt_id);
        SHL_ERR(db_stmt_recorder_image(u->rec, txn, kind, u->return_new ? doc : pre, st));
        shl_db_sharding_observe_write(u->op, u->coll->ns, pre, doc);
    }
    if (u->return_new) {
        u->value = bson_copy(doc);
    } else if (pre != NULL) {
        u->value = bson_copy(pre);
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
fam_unit_fn(shl_storage_txn_t *txn, void *arg, shl_status_t *st)
{
    fam_unit_t *u = arg;
    int ret = 0;
    exec_plan_t *plan = NULL;
    exec_row_t row;
    bool eof = true;
    bson_t *pre = NULL;
    int64_t rid = 0;

    fam_reset(u);
    db_stmt_recorder_begin(u->rec);
    u->q->limit = 1;
    SHL_ERR(exec_plan_build(shl_storage_txn_engine(txn), txn, 0, u->coll, u->ns, u->q, &plan, st));
    if (u->upd != NULL) {
        shl_update_set_collator(u->upd, u->q->collator); /* the plan settled the collation */
    }
    SHL_ERR(exec_plan_next(plan, u->op, &row, &eof, st));
    if (!eof) {
        pre = bson_copy(row.doc);
        rid = row.rid;
    }
    /* Close the scan before writing; a sorted plan's rows carry no RecordId. */
    exec_plan_destroy(plan);
    plan = NULL;
    if (pre != NULL && rid == 0) {
        /* Find the record again by _id (SORT drops RecordIds). */
        bson_iter_t it;
        bson_t again;
        bool found = false;
        if (!bson_iter_init_find(&it, pre, "_id")) {
            SHL_FAIL(st, SHL_CODE_INTERNAL_ERROR, "findAndModify: document without _id");
        }
        ret = shl_doc_find_by_id(txn, u->coll, bson_iter_value(&it), &again, &rid, &found, st);
        bson_destroy(&again);
        SHL_ERR(ret);
        if (!found) {
            SHL_FAIL(st, SHL_CODE_WRITE_CONFLICT, "findAndModify: document moved");
        }
    }
    if (pre != NULL) {
        u->found = true;
        if (u->remove) {
            shl_write_opts_t wo;
            bson_t key;
            const shl_write_opts_t *wop =
                db_stmt_recorder_opts_image(u->rec, u->stmt_id, "preImage", &wo);
            wop = shl_db_delete_opts(u->op, u->coll->ns, pre, wop, &wo, &key);
            ret = shl_doc_delete(txn, u->coll, rid, pre, wop, st);
            bson_destroy(&key);
            SHL_ERR(ret);
            db_stmt_recorder_wrote(u->rec, u->stmt_id);
            SHL_ERR(db_stmt_recorder_image(u->rec, txn, "preImage", pre, st));
            shl_db_sharding_observe_write(u->op, u->coll->ns, pre, NULL);
            u->value = pre;
            pre = NULL;
        } else {
            SHL_ERR(fam_write_doc(u, txn, rid, pre, st));
        }
    } else if (u->upsert) {
        SHL_ERR(fam_write_doc(u, txn, 0, NULL, st));
    }
    SHL_ERR(db_stmt_recorder_finish(u->rec, txn, st));
done:
    exec_plan_destroy(plan);
    if (pre != NULL) {
        bson_destroy(pre);
    }
    return ret;
}

/*
 * A retried findAndModify that already wrote: its outcome from its write 'entry' at 'ts' (a
 * delete, an update or an upsert's insert) and the document it returned from the image
 * stored with it, as the original reply had them; 'parent': the write is the parent
 * session's, retried in a retryable internal transaction of it (db_session_parent_image).
 */
static int
fam_from_history(shl_op_ctx_t *op, const bson_t *entry, uint64_t ts, bool parent, fam_unit_t *u,
                 shl_status_t *st)
{
    int ret = 0;
    bson_t o, image = BSON_INITIALIZER;
    bson_iter_t it;
    const char *kind = "", *image_kind = NULL;

    if (bson_iter_init_find(&it, entry, "op") && BSON_ITER_HOLDS_UTF8(&it)) {
        kind = bson_iter_utf8(&it, NULL);
    }
    if (bson_iter_init_find(&it, entry, "needsRetryImage") && BSON_ITER_HOLDS_UTF8(&it)) {
        image_kind = bson_iter_utf8(&it, NULL);
    } else if (bson_has_field(entry, "preImageOpTime")) {
        image_kind = "preImage"; /* migrated from a donor, which sent the image along */
    } else if (bson_has_field(entry, "postImageOpTime")) {
        image_kind = "postImage";
    }
    /* The retry must ask for what the original did (MongoDB's compatibility checks). */
    if (strcmp(kind, "d") == 0 && !u->remove) {
        SHL_FAIL(st, 40606,
                 "findAndModify retry request is not compatible with previous write in the "
                 "transaction of type: d");
    }
    if (strcmp(kind, "i") == 0 && !u->upsert) {
        SHL_FAIL(st, 40608,
                 "findAndModify retry request is not compatible with previous write in the "
                 "transaction of type: i");
    }
    if (strcmp(kind, "u") == 0 && u->remove) {
        SHL_FAIL(st, 40609,
                 "findAndModify retry request is not compatible with previous write in the "
                 "transaction of type: u");
    }
    if (strcmp(kind, "u") == 0 && image_kind != NULL &&
        u->return_new != (strcmp(image_kind, "postImage") == 0)) {
        SHL_FAIL(st, u->return_new ? 40611 : 40612,
                 "findAndModify retry request wants the document %s update returned, but only %s "
                 "update document is stored",
                 u->return_new ? "after" : "before", u->return_new ? "before" : "after");
    }
    u->found = true;
    if (strcmp(kind, "i") == 0) {
        /* An upsert: the inserted document is the entry's. */
        u->found = false;
        if (shl_bson_get_subdoc(entry, "o", &o)) {
            if (bson_iter_init_find(&it, &o, "_id")) {
                bson_value_copy(bson_iter_value(&it), &u->upserted_id);
                u->upserted = true;
            }
            if (u->return_new) {
                u->value = bson_copy(&o);
            }
        }
    } else if (image_kind != NULL) {
        u->updated_existing = strcmp(kind, "u") == 0;
        bson_destroy(&image);
        SHL_ERR(parent ? db_session_parent_image(op, ts, image_kind, &image, st)
                       : db_session_find_image(op, ts, image_kind, &image, st));
        u->value = bson_copy(&image);
    } else {
        SHL_FAIL(st, 40607, "No pre-image available for findAndModify retry request");
    }
    db_op_note_write_ts(ts);
done:
    bson_destroy(&image);
    return ret;
}

/* A retried findAndModify of the op's own retryable write that already wrote (entry 'ts'). */
static int
fam_retried(shl_op_ctx_t *op, uint64_t ts, fam_unit_t *u, shl_status_t *st)
{
    bson_t entry;
    int ret = db_session_read_entry(op, ts, &entry, st);

    if (ret == 0) {
        ret = fam_from_history(op, &entry, ts, false, u, st);
    }
    bson_destroy(&entry);
    return ret;
}

/*
 * The reply of a findAndModify retried after a retryable internal transaction of the user's
 * write ran it (txn_participant.h db_txn_note_stmt): a findAndModify's answer as it was --
 * an update's whose document moved to another shard was recorded by the removal on its old
 * shard, so it updated an existing document -- or an upsert's insert.
 */
static int
answer_reply(const bson_t *answer, bool remove, bool return_new, bson_t *reply, shl_status_t *st)
{
    bson_iter_t it, le;
    bson_t leo, value;
    const char *k = "";
    int ret = 0;

    if (bson_iter_init_find(&it, answer, "k") && BSON_ITER_HOLDS_UTF8(&it)) {
        k = bson_iter_utf8(&it, NULL);
    }
    if (strcmp(k, "f") == 0) {
        BSON_APPEND_DOCUMENT_BEGIN(reply, "lastErrorObject", &leo);
        if (bson_iter_init_find(&it, answer, "lastErrorObject") && bson_iter_recurse(&it, &le)) {
            while (bson_iter_next(&le)) {
                bson_append_iter(&leo, NULL, 0, &le);
            }
        }
        if (!remove && !bson_has_field(answer, "lastErrorObject.updatedExisting")) {
            BSON_APPEND_BOOL(&leo, "updatedExisting", true);
        }
        bson_append_document_end(reply, &leo);
        if (!remove && return_new && bson_iter_init_find(&it, answer, "post")) {
            bson_append_iter(reply, "value", 5, &it);
        } else if (bson_iter_init_find(&it, answer, "value")) {
            bson_append_iter(reply, NULL, 0, &it);
        } else {
            BSON_APPEND_NULL(reply, "value");
        }
    } else if (strcmp(k, "i") == 0 && !remove && bson_iter_init_find(&it, answer, "_id")) {
        BSON_APPEND_DOCUMENT_BEGIN(reply, "lastErrorObject", &leo);
        BSON_APPEND_INT32(&leo, "n", 1);
        BSON_APPEND_BOOL(&leo, "updatedExisting", false);
        bson_append_iter(&leo, "upserted", 8, &it);
        bson_append_document_end(reply, &leo);
        if (return_new && shl_bson_get_subdoc(answer, "doc", &value)) {
            BSON_APPEND_DOCUMENT(reply, "value", &value);
        } else {
            BSON_APPEND_NULL(reply, "value");
        }
    } else {
        SHL_FAIL(st, 40606,
                 "findAndModify retry request is not compatible with previous write in the "
                 "transaction");
    }
done:
    return ret;
}

static int
cmd_find_and_modify(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    int ret = 0;
    db_node_t *node = db_node(op);
    shl_ns_t ns;
    shl_write_concern_t wc;
    bson_t query, sort, fields, afilters;
    bool has_query, has_sort, has_fields, has_af, found, locked = false;
    bool remove = false, return_new = false, upsert = false, bypass = false;
    bson_iter_t uit;
    db_validator_t validator;
    exec_query_t q;
    shl_update_t *upd = NULL;
    shl_projection_t *proj = NULL;
    shl_coll_handle_t h;
    fam_unit_t u;
    uint64_t ts = 0;
    bson_t leo;
    shl_db_orphan_filter_t *filter = NULL;
    db_stmt_recorder_t rec;
    int32_t *stmt_id = NULL;
    uint64_t retried_ts = 0;
    bool retried = false;
    bson_t vars = BSON_INITIALIZER;
    bool has_vars = false;
    bson_t answer = BSON_INITIALIZER;
    bool user_ids = bson_has_field(cmd, "stmtId");

    db_cmd_begin(op);
    memset(&q, 0, sizeof(q));
    memset(&u, 0, sizeof(u));
    memset(&validator, 0, sizeof(validator));
    db_stmt_recorder_init(&rec, op);
    SHL_ERR(shl_cmd_check_fields(cmd, fam_fields, st));
    SHL_ERR(db_ns_from_cmd(op, cmd, &ns, st));
    SHL_ERR(shl_db_sharding_check(op, ns.full, SHL_DB_SHARD_WRITE, &filter, st));
    SHL_ERR(db_check_write_ns(op, &ns, st));
    SHL_ERR(db_write_concern_get(op, &wc, st));
    SHL_ERR(db_check_collation(cmd, "collation", st));
    SHL_ERR(db_let_vars(op, cmd, false, &vars, &has_vars, st));
    SHL_ERR(shl_cmd_get_doc(cmd, "query", &query, &has_query, st));
    SHL_ERR(shl_cmd_get_doc(cmd, "sort", &sort, &has_sort, st));
    SHL_ERR(shl_cmd_get_doc(cmd, "fields", &fields, &has_fields, st));
    SHL_ERR(shl_cmd_get_array(cmd, "arrayFilters", &afilters, &has_af, st));
    SHL_ERR(shl_cmd_get_bool(cmd, "remove", &remove, st));
    SHL_ERR(shl_cmd_get_bool(cmd, "new", &return_new, st));
    SHL_ERR(shl_cmd_get_bool(cmd, "upsert", &upsert, st));
    SHL_ERR(shl_cmd_get_bool(cmd, "bypassDocumentValidation", &bypass, st));
    found = bson_iter_init_find(&uit, cmd, "update");
    if (found && !BSON_ITER_HOLDS_DOCUMENT(&uit) && !BSON_ITER_HOLDS_ARRAY(&uit)) {
        SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE,
                 "Update argument must be either an object or an array");
    }
    if (remove) {
        if (found) {
            SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE, "Cannot specify both an update and remove=true");
        }
        if (upsert) {
            SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE,
                     "Cannot specify both upsert=true and remove=true ");
        }
        if (return_new) {
            SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE,
                     "Cannot specify both new=true and remove=true; 'remove' always returns "
                     "the deleted document");
        }
        if (has_af) {
            SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE, "Cannot specify arrayFilters and remove=true");
        }
    } else if (!found) {
        SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE, "Either an update or remove=true must be specified");
    }
    SHL_ERR(exec_query_init(&q, has_query ? &query : NULL, has_sort ? &sort : NULL, NULL, st));
    SHL_ERR(db_query_collation(cmd, "collation", &q, st));
    if (has_vars) {
        shl_matcher_bind_vars(q.matcher, &vars);
        u.vars = &vars;
    }
    q.orphan_filter = filter; /* orphans are neither returned nor modified */
    filter = NULL;
    SHL_ERR(db_cmd_get_hint(cmd, &q.has_hint, &q.hint, st));
    if (has_fields && !bson_empty(&fields)) {
        SHL_ERR(shl_projection_new(&fields, &q.filter, &proj, st));
    }
    if (!remove) {
        SHL_ERR(shl_update_new(bson_iter_value(&uit), has_af ? &afilters : NULL, &upd, st));
    }
    SHL_ERR(shl_session_stmt_ids(cmd, 1, &stmt_id, st));
    retried = (user_ids || op->session != NULL) &&
              db_session_child_answer(node->sessions, op, stmt_id[0], &answer);
    if (!retried && user_ids && db_txn_records_stmts(op)) {
        bson_destroy(&answer);
        SHL_ERR(db_session_parent_answer(node->sessions, op, stmt_id[0], true, &answer, &retried,
                                         st));
    }
    u.remove = remove;
    u.return_new = return_new;
    u.upsert = upsert;
    if (retried && bson_has_field(&answer, "w")) {
        /* It ran as a plain retryable write of the parent session (here, or on a donor that
         * sent its history and image along): answered from that history and image. */
        bson_t w;
        bson_iter_t tit;
        if (!shl_bson_get_subdoc(&answer, "w", &w) || !bson_iter_init_find(&tit, &answer, "ts")) {
            SHL_FAIL(st, SHL_CODE_INTERNAL_ERROR, "malformed findAndModify history");
        }
        SHL_ERR(fam_from_history(op, &w, shl_bson_iter_timestamp_u64(&tit), true, &u, st));
        goto reply; /* which adds retriedStmtId */
    }
    if (retried) {
        /* It ran in a retryable internal transaction of the user's write. */
        SHL_ERR(answer_reply(&answer, remove, return_new, reply, st));
        BSON_APPEND_INT32(reply, "retriedStmtId", stmt_id[0]);
        db_write_concern_wait(op, &wc, reply);
        goto done;
    }
    SHL_ERR(db_session_stmt_executed(op, stmt_id[0], &retried_ts, &retried, st));
    if (retried) {
        /* A retried retryable write that ran: answered from its history, not run again. */
        SHL_ERR(fam_retried(op, retried_ts, &u, st));
        goto reply;
    }
    if (upsert) {
        SHL_ERR(db_ensure_collection(op, &ns, &h, st));
    } else {
        SHL_ERR(shl_storage_coll_acquire(node->eng, ns.full, SHL_LOCK_SHARED, &h, st));
    }
    locked = true;
    if (h.coll != NULL) {
        SHL_ERR(db_validator_init(&validator, h.coll, bypass || remove, st));
        u.validator = &validator;
        u.op = op;
        u.coll = h.coll;
        u.ns = ns.full;
        u.q = &q;
        u.upd = upd;
        u.upsert = upsert;
        u.stmt_id = stmt_id[0];
        u.rec = &rec;
        ret = db_write_retry(op, node->eng, fam_unit_fn, &u, &ts, st);
        if (ret == SHL_CODE_DUPLICATE_KEY && upsert && !u.found) {
            ret = db_write_retry(op, node->eng, fam_unit_fn, &u, &ts, st);
        }
        SHL_ERR(ret);
        db_stmt_recorder_commit(&rec);
        db_op_note_write_ts(ts);
    }
    shl_storage_coll_release(&h);
    locked = false;

reply:
    BSON_APPEND_DOCUMENT_BEGIN(reply, "lastErrorObject", &leo);
    BSON_APPEND_INT32(&leo, "n", (u.found || u.upserted) ? 1 : 0);
    if (!remove) {
        BSON_APPEND_BOOL(&leo, "updatedExisting", u.updated_existing);
        if (u.upserted) {
            BSON_APPEND_VALUE(&leo, "upserted", &u.upserted_id);
        }
    }
    bson_append_document_end(reply, &leo);
    if (u.value == NULL) {
        BSON_APPEND_NULL(reply, "value");
    } else if (proj != NULL) {
        bson_t out;
        shl_match_details_t details, *dp = NULL;
        if (shl_projection_needs_match_details(proj)) {
            bool matched;
            memset(&details, 0, sizeof(details));
            if (shl_matcher_match(q.matcher, u.value, &details, &matched, st) == 0) {
                dp = &details;
            }
        }
        ret = shl_projection_apply(proj, u.value, dp, NULL, &out, st);
        if (ret == 0) {
            BSON_APPEND_DOCUMENT(reply, "value", &out);
        }
        bson_destroy(&out);
        SHL_ERR(ret);
    } else {
        BSON_APPEND_DOCUMENT(reply, "value", u.value);
    }
    if (retried) {
        BSON_APPEND_INT32(reply, "retriedStmtId", stmt_id[0]);
        db_session_note_retried(op, 1);
    } else if (user_ids && (u.found || u.upserted) && db_txn_records_stmts(op)) {
        bson_iter_t it;
        bson_reinit(&answer);
        BSON_APPEND_UTF8(&answer, "k", "f");
        if (bson_iter_init_find(&it, reply, "lastErrorObject")) {
            bson_append_iter(&answer, NULL, 0, &it);
        }
        if (bson_iter_init_find(&it, reply, "value")) {
            bson_append_iter(&answer, NULL, 0, &it);
        }
        BSON_APPEND_BOOL(&answer, "new", return_new);
        if (bson_iter_init_find(&it, cmd, DB_WCOS_INSERT_FIELD) && BSON_ITER_HOLDS_DOCUMENT(&it)) {
            /* The removal of a document an update moved (the router's): a retry of that
             * update may want the document after it. */
            bson_append_iter(&answer, "post", 4, &it);
        }
        db_txn_note_stmt(op, stmt_id[0], &answer);
    }
    db_write_concern_wait(op, &wc, reply);
done:
    if (locked) {
        shl_storage_coll_release(&h);
    }
    fam_reset(&u);
    db_stmt_recorder_cleanup(&rec);
    bson_free(stmt_id);
    db_validator_cleanup(&validator);
    shl_update_destroy(upd);
    shl_projection_destroy(proj);
    exec_query_cleanup(&q);
    shl_db_orphan_filter_release(filter);
    bson_destroy(&vars);
    bson_destroy(&answer);
    return ret;
}

static const shl_command_t fam_commands[] = {
    {"findAndModify",
     {"findandmodify", NULL},
     cmd_find_and_modify,
     SHL_CMD_NEEDS_PRIMARY | SHL_CMD_WRITE | SHL_CMD_IN_TXN | SHL_CMD_RETRYABLE_WRITE,
     "find a document and update or remove it"},
};

void
db_register_fam_commands(shl_command_registry_t *reg)
{
    for (size_t i = 0; i < sizeof(fam_commands) / sizeof(fam_commands[0]); i++) {
        shl_command_registry_add(reg, &fam_commands[i]);
    }
}
