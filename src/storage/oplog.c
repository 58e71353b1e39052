/*
 * oplog.c -- oplog entries in MongoDB's format, readers bounded by the no-holes point,
 * and idempotent application of entries (startup recovery). See oplog.h.
 */
#include "bson/bson_iter.h"
#include "storage/storage_private.h"

#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "storage/oplog.h"
#include "bson/bson_util.h"
#include "bson/update_diff.h"
#include "storage/record_store.h"
#include "storage/write.h"

void
shl_oplog_entry_build(bson_t *out, char op, const char *ns, const uint8_t *uuid, const bson_t *o,
                      const bson_t *o2, uint64_t ts, int64_t term, int64_t wall_ms,
                      const bson_t *extra)
{
    bson_init(out);
    shl_oplog_entry_fill(out, op, ns, uuid, o, o2, ts, term, wall_ms, extra);
}

void
shl_oplog_entry_fill(bson_t *out, char op, const char *ns, const uint8_t *uuid, const bson_t *o,
                     const bson_t *o2, uint64_t ts, int64_t term, int64_t wall_ms,
                     const bson_t *extra)
{
    char opstr[2] = {op, '\0'};

    BSON_APPEND_UTF8(out, "op", opstr);
    BSON_APPEND_UTF8(out, "ns", ns);
    if (uuid != NULL) {
        shl_bson_append_uuid(out, "ui", uuid);
    }
    if (o != NULL) {
        BSON_APPEND_DOCUMENT(out, "o", o);
    } else {
        bson_t empty = BSON_INITIALIZER;
        BSON_APPEND_DOCUMENT(out, "o", &empty);
    }
    if (o2 != NULL) {
        BSON_APPEND_DOCUMENT(out, "o2", o2);
    }
    BSON_APPEND_TIMESTAMP(out, "ts", SHL_TS_SECS(ts), SHL_TS_INC(ts));
    BSON_APPEND_INT64(out, "t", term);
    BSON_APPEND_INT64(out, "v", 2);
    BSON_APPEND_DATE_TIME(out, "wall", wall_ms);
    if (extra != NULL) {
        bson_concat(out, extra); /* its fields, copied as one block */
    }
}

int
shl_oplog_cursor_open(shl_storage_txn_t *txn, uint64_t after_ts, shl_record_cursor_t **out,
                      shl_status_t *st)
{
    int ret = shl_record_cursor_open(txn, txn->eng->oplog, true, out, st);
    if (ret == 0 && after_ts != 0) {
        shl_record_cursor_seek(*out, (int64_t)after_ts + 1);
    }
    return ret;
}

int
shl_oplog_top(shl_storage_engine_t *eng, uint64_t *ts, shl_status_t *st)
{
    shl_storage_txn_t *txn = NULL;
    shl_record_cursor_t *rc = NULL;
    int64_t rid = 0;
    bson_t doc;
    bool eof = true;
    int ret = 0;

    *ts = 0;
    SHL_ERR(shl_storage_txn_begin(eng, NULL, &txn, st));
    SHL_ERR(shl_record_cursor_open(txn, eng->oplog, false, &rc, st));
    SHL_ERR(shl_record_cursor_next(rc, &rid, &doc, &eof, st));
    if (!eof) {
        *ts = (uint64_t)rid;
    }
done:
    shl_record_cursor_close(rc);
    shl_storage_txn_abort(txn);
    return ret;
}

/* ---------------------------------------------------------------------------------
 * Applying entries
 * ------------------------------------------------------------------------------ */

typedef struct apply_arg {
    const bson_t *entry;
    char op;
    uint64_t ts;
    shl_collection_t *coll;
    bson_t o, o2;
    bool has_o2;
    int64_t index; /* a transaction's op: its index in the transaction */
} apply_arg_t;

/*
 * A $v:2 update entry: the document with _id 'id' gets 'diff' applied. A document that is
 * not there is skipped, as MongoDB's recovery and initial sync skip it: a later entry of this
 * replay deleted it (the replay started from an older state).
 */
static int
apply_diff(shl_storage_txn_t *txn, const shl_collection_t *coll, const bson_value_t *id,
           const bson_t *diff, shl_status_t *st)
{
    bson_t cur = BSON_INITIALIZER, post = BSON_INITIALIZER;
    int64_t rid = 0;
    bool found = false;
    int ret = 0;

    bson_destroy(&cur);
    SHL_ERR(shl_doc_find_by_id(txn, coll, id, &cur, &rid, &found, st));
    if (!found) {
        SHL_LOG_WARNING(RECOVERY, 2100401, "skipping a $v:2 update of a missing document", "ns",
                        BCON_UTF8(coll->ns));
        goto done;
    }
    bson_destroy(&post);
    if (!shl_update_diff_apply(&cur, diff, &post)) {
        SHL_FAIL(st, SHL_CODE_BAD_VALUE, "malformed $v:2 update oplog entry");
    }
    SHL_ERR(shl_doc_update(txn, coll, rid, &cur, &post, NULL, st));
done:
    bson_destroy(&cur);
    bson_destroy(&post);
    return ret;
}

static int
apply_crud(shl_storage_txn_t *txn, void *varg, shl_status_t *st)
{
    apply_arg_t *a = varg;
    bson_iter_t it;
    bson_t cur, diff;
    int64_t rid = 0;
    bool found = false;
    int ret = 0;

    bson_init(&cur);
    txn->fixed_ts = a->ts;
    /* A transaction's op (no entry of its own) writes its pre-image under its index in the
     * transaction, at the timestamp of the transaction's last applyOps entry, as the primary
     * did (shl_txn_write_pre_images). */
    txn->txn_op_index = a->index;
    if (a->entry != NULL && bson_iter_init_find(&it, a->entry, "wall") &&
        BSON_ITER_HOLDS_DATE_TIME(&it)) {
        txn->fixed_wall_ms = bson_iter_date_time(&it);
    }
    switch (a->op) {
    case 'i':
        if (!bson_iter_init_find(&it, &a->o, "_id")) {
            SHL_FAIL(st, SHL_CODE_BAD_VALUE, "insert oplog entry without _id");
        }
        SHL_ERR(shl_doc_upsert_by_id(txn, a->coll, &a->o, bson_iter_value(&it), NULL, st));
        break;
    case 'u':
        if (!a->has_o2 || !bson_iter_init_find(&it, &a->o2, "_id")) {
            SHL_FAIL(st, SHL_CODE_BAD_VALUE, "update oplog entry without o2._id");
        }
        if (shl_update_diff_of(&a->o, &diff)) {
            SHL_ERR(apply_diff(txn, a->coll, bson_iter_value(&it), &diff, st));
            break;
        }
        {
            bson_iter_t first;
            if (bson_iter_init(&first, &a->o) && shl_iter_next(&first) &&
                shl_iter_key(&first)[0] == '$') {
                SHL_FAIL(st, SHL_CODE_BAD_VALUE, "only replacement-style and $v:2 updates can be "
                                                 "applied");
            }
        }
        SHL_ERR(shl_doc_upsert_by_id(txn, a->coll, &a->o, bson_iter_value(&it), NULL, st));
        break;
    case 'd':
        if (!bson_iter_init_find(&it, &a->o, "_id")) {
            SHL_FAIL(st, SHL_CODE_BAD_VALUE, "delete oplog entry without _id");
        }
        bson_destroy(&cur);
        SHL_ERR(shl_doc_find_by_id(txn, a->coll, bson_iter_value(&it), &cur, &rid, &found, st));
        if (found) {
            SHL_ERR(shl_doc_delete(txn, a->coll, rid, &cur, NULL, st));
        }
        break;
    default:
        break;
    }
done:
    bson_destroy(&cur);
    return ret;
}

int
shl_oplog_apply_inner_ops(shl_storage_txn_t *txn, const bson_t *ops, shl_status_t *st)
{
    bson_iter_t it, f;
    int ret = 0;

    if (!bson_iter_init(&it, ops)) {
        SHL_FAIL(st, SHL_CODE_BAD_VALUE, "malformed applyOps array");
    }
    while (bson_iter_next(&it)) {
        apply_arg_t a = {0};
        bson_t op;
        const uint8_t *data;
        uint32_t len;
        bson_subtype_t sub;
        shl_collection_t *coll = NULL;
        const char *o = NULL;
        uint64_t fixed = txn->fixed_ts;

        if (!shl_bson_iter_view(&it, &op)) {
            SHL_FAIL(st, SHL_CODE_BAD_VALUE, "applyOps element is not an object");
        }
        if (bson_iter_init_find(&f, &op, "op") && BSON_ITER_HOLDS_UTF8(&f)) {
            o = bson_iter_utf8(&f, NULL);
        }
        if (o == NULL || strlen(o) != 1 || strchr("iudnc", o[0]) == NULL) {
            SHL_FAIL(st, SHL_CODE_BAD_VALUE, "applyOps element with an unknown op");
        }
        if (o[0] == 'n') {
            continue;
        }
        if (o[0] == 'c') {
            /* A create / createIndexes of the transaction: pending in 'txn' like the live
             * transaction's, for the ops after it. */
            SHL_ERR(shl_catalog_apply_txn_command(txn, &op, st));
            txn->fixed_ts = fixed;
            continue;
        }
        if (bson_iter_init_find(&f, &op, "ui") && BSON_ITER_HOLDS_BINARY(&f)) {
            bson_iter_binary(&f, &sub, &len, &data);
            if (len == 16) {
                coll = shl_collection_current_by_uuid(txn, data);
            }
        }
        if (coll == NULL) {
            SHL_LOG_WARNING(RECOVERY, 5100203,
                            "skipping a transaction's op for a missing collection");
            continue;
        }
        a.op = o[0];
        a.coll = coll;
        a.ts = fixed;
        a.index = strtoll(bson_iter_key(&it), NULL, 10);
        if (!shl_bson_get_subdoc(&op, "o", &a.o)) {
            shl_collection_release(coll);
            SHL_FAIL(st, SHL_CODE_BAD_VALUE, "applyOps element without 'o'");
        }
        a.has_o2 = shl_bson_get_subdoc(&op, "o2", &a.o2);
        ret = apply_crud(txn, &a, st);
        txn->fixed_ts = fixed;
        shl_collection_release(coll);
        SHL_ERR(ret);
    }
done:
    return ret;
}

int
shl_oplog_read(shl_storage_engine_t *eng, uint64_t ts, bson_t *out, bool *found, shl_status_t *st)
{
    shl_storage_txn_t *txn = NULL;
    int ret = 0;

    bson_init(out);
    *found = false;
    SHL_ERR(shl_storage_txn_begin(eng, NULL, &txn, st));
    bson_destroy(out);
    SHL_ERR(shl_record_get(txn, eng->oplog, (int64_t)ts, out, found, st));
done:
    shl_storage_txn_abort(txn);
    return ret;
}

/* The ts of an optime document field 'key' ({ts, t}) of 'doc', 0 if absent. */
static uint64_t
optime_field(const bson_t *doc, const char *key)
{
    bson_t sub;
    bson_iter_t it;

    if (shl_bson_get_subdoc(doc, key, &sub) && bson_iter_init_find(&it, &sub, "ts") &&
        BSON_ITER_HOLDS_TIMESTAMP(&it)) {
        return shl_bson_iter_timestamp_u64(&it);
    }
    return 0;
}

int
shl_oplog_txn_ops(shl_storage_engine_t *eng, const bson_t *entry, bson_t *ops, shl_status_t *st)
{
    bson_t **chain = NULL, o, arr;
    size_t n = 0, cap = 0;
    uint64_t prev = optime_field(entry, "prevOpTime");
    bson_iter_t it;
    uint32_t k = 0;
    char key[16];
    const char *kp;
    int ret = 0;

    bson_init(ops);
    /* Walk the chain back through the partialTxn entries of the same transaction. */
    while (prev != 0) {
        bson_t *e = bson_aligned_alloc0(BSON_ALIGNOF(bson_t), sizeof(*e)); /* shl_oplog_read inits */
        bool found = false, partial;
        bson_t eo;
        ret = shl_oplog_read(eng, prev, e, &found, st);
        if (ret != 0 || !found) {
            bson_destroy(e);
            bson_free(e);
            SHL_ERR(ret);
            break;
        }
        partial = shl_bson_get_subdoc(e, "o", &eo) && bson_iter_init_find(&it, &eo, "partialTxn");
        if (!partial) {
            bson_destroy(e);
            bson_free(e);
            break;
        }
        if (n == cap) {
            cap = cap ? cap * 2 : 4;
            chain = bson_realloc(chain, cap * sizeof(*chain));
        }
        chain[n++] = e;
        prev = optime_field(e, "prevOpTime");
    }
    for (size_t i = n + 1; i > 0; i--) {
        const bson_t *e = i - 1 == n ? entry : chain[i - 1];
        if (!shl_bson_get_subdoc(e, "o", &o) || !bson_iter_init_find(&it, &o, "applyOps") ||
            !BSON_ITER_HOLDS_ARRAY(&it) || !shl_bson_iter_view(&it, &arr) || !bson_iter_init(&it, &arr)) {
            continue;
        }
        while (bson_iter_next(&it)) {
            bson_uint32_to_string(k++, &kp, key, sizeof(key));
            bson_append_iter(ops, kp, -1, &it);
        }
    }
done:
    for (size_t i = 0; i < n; i++) {
        bson_destroy(chain[i]);
        bson_free(chain[i]);
    }
    bson_free(chain);
    return ret;
}

typedef struct txn_apply_arg {
    const bson_t *ops;
    uint64_t ts;
} txn_apply_arg_t;

static int
apply_txn_unit(shl_storage_txn_t *txn, void *varg, shl_status_t *st)
{
    txn_apply_arg_t *a = varg;

    txn->fixed_ts = a->ts;
    return shl_oplog_apply_inner_ops(txn, a->ops, st);
}

/*
 * A transaction's entry: an unprepared transaction's last applyOps entry applies every op of
 * its chain at its own timestamp; its partialTxn entries, a prepare entry and the decision
 * entries of a prepared transaction are the role's (replay_derive), which prepares and
 * commits it as the live node did.
 */
static int
apply_txn_entry(shl_storage_engine_t *eng, const bson_t *entry, const bson_t *o, uint64_t ts,
                shl_status_t *st)
{
    bson_iter_t it;
    bson_t ops = BSON_INITIALIZER;
    txn_apply_arg_t a = {&ops, ts};
    int ret = 0;

    if (!bson_iter_init_find(&it, o, "applyOps") || bson_has_field(o, "partialTxn") ||
        bson_has_field(o, "prepare")) {
        goto done;
    }
    bson_destroy(&ops);
    SHL_ERR(shl_oplog_txn_ops(eng, entry, &ops, st));
    SHL_ERR(shl_storage_write_retry(eng, apply_txn_unit, &a, NULL, st));
done:
    bson_destroy(&ops);
    return ret;
}

int
shl_oplog_apply(shl_storage_engine_t *eng, const bson_t *entry, shl_status_t *st)
{
    apply_arg_t a = {.entry = entry};
    shl_coll_handle_t h = {0};
    bson_iter_t it;
    const char *op = NULL;
    uint32_t secs = 0, inc = 0;
    int ret = 0;

    if (bson_iter_init_find(&it, entry, "op") && BSON_ITER_HOLDS_UTF8(&it)) {
        op = bson_iter_utf8(&it, NULL);
    }
    if (bson_iter_init_find(&it, entry, "ts") && BSON_ITER_HOLDS_TIMESTAMP(&it)) {
        bson_iter_timestamp(&it, &secs, &inc);
    }
    a.ts = SHL_TS_MAKE(secs, inc);
    if (op == NULL || op[0] == '\0' || op[1] != '\0' || a.ts == 0) {
        SHL_FAIL(st, SHL_CODE_BAD_VALUE, "malformed oplog entry");
    }
    a.op = op[0];
    if (a.op == 'n') {
        goto done;
    }
    if (a.op == 'c') {
        bson_t o;
        bson_iter_t first;
        if (shl_bson_get_subdoc(entry, "o", &o) && bson_iter_init(&first, &o) &&
            shl_iter_next(&first) &&
            (strcmp(shl_iter_key(&first), "applyOps") == 0 ||
             strcmp(shl_iter_key(&first), "commitTransaction") == 0 ||
             strcmp(shl_iter_key(&first), "abortTransaction") == 0)) {
            SHL_ERR(apply_txn_entry(eng, entry, &o, a.ts, st));
            goto done;
        }
        SHL_ERR(shl_catalog_replay_command(eng, entry, a.ts, st));
        goto done;
    }
    if (a.op != 'i' && a.op != 'u' && a.op != 'd') {
        SHL_FAIL(st, SHL_CODE_BAD_VALUE, "unknown oplog op '%s'", op);
    }
    if (!shl_bson_get_subdoc(entry, "o", &a.o)) {
        SHL_FAIL(st, SHL_CODE_BAD_VALUE, "oplog entry without 'o'");
    }
    a.has_o2 = shl_bson_get_subdoc(entry, "o2", &a.o2);
    {
        /* By UUID, as MongoDB applies: the namespace may have been renamed since. */
        shl_collection_t *byid = NULL;
        const uint8_t *data;
        uint32_t len;
        bson_subtype_t sub;
        if (bson_iter_init_find(&it, entry, "ui") && BSON_ITER_HOLDS_BINARY(&it)) {
            bson_iter_binary(&it, &sub, &len, &data);
            if (len == 16) {
                byid = shl_catalog_get_by_uuid(eng, data);
            }
        }
        if (byid == NULL) {
            SHL_LOG_WARNING(RECOVERY, 5100202, "skipping oplog entry for a missing collection",
                            "ts", BCON_TIMESTAMP(secs, inc));
            goto done;
        }
        ret = shl_storage_coll_acquire(eng, byid->ns, SHL_LOCK_SHARED, &h, st);
        shl_collection_release(byid);
        SHL_ERR(ret);
    }
    if (h.coll == NULL) {
        goto done;
    }
    a.coll = h.coll;
    SHL_ERR(shl_storage_write_retry(eng, apply_crud, &a, NULL, st));
done:
    shl_storage_coll_release(&h);
    return ret;
}

typedef struct raw_batch {
    const bson_t *const *entries;
    size_t n;
} raw_batch_t;

static int
write_raw_unit(shl_storage_txn_t *txn, void *varg, shl_status_t *st)
{
    raw_batch_t *b = varg;
    WT_CURSOR *c = NULL;
    int ret = 0;

    SHL_ERR(shl_wt_cursor_get(txn->eng, txn->sess, "table:oplog", &c, st));
    for (size_t i = 0; i < b->n; i++) {
        const bson_t *e = b->entries[i];
        bson_iter_t it;
        uint32_t secs = 0, inc = 0;
        WT_ITEM v;
        int wtret;

        if (!bson_iter_init_find(&it, e, "ts") || !BSON_ITER_HOLDS_TIMESTAMP(&it)) {
            SHL_FAIL(st, SHL_CODE_BAD_VALUE, "oplog entry without a ts");
        }
        bson_iter_timestamp(&it, &secs, &inc);
        SHL_ERR(shl_txn_set_ts(txn, SHL_TS_MAKE(secs, inc), st));
        v.data = bson_get_data(e);
        v.size = e->len;
        c->set_key(c, (int64_t)SHL_TS_MAKE(secs, inc));
        c->set_value(c, &v);
        wtret = c->insert(c);
        if (wtret == WT_DUPLICATE_KEY) {
            /* The same entry written before a restart, or this member's own local.* write
             * that took the slot (its clock is not the primary's): the set's entry wins. */
            c->set_key(c, (int64_t)SHL_TS_MAKE(secs, inc));
            c->set_value(c, &v);
            wtret = c->update(c);
        }
        if (wtret != 0) {
            SHL_ERR(shl_wt_err(st, wtret, "oplog insert"));
        }
        shl_txn_add_delta(txn, txn->eng->oplog->rs, 1, e->len);
    }
done:
    if (c != NULL) {
        shl_wt_cursor_put(txn->sess, "table:oplog", c);
    }
    return ret;
}

int
shl_oplog_apply_replicated(shl_storage_engine_t *eng, const bson_t *const *entries, size_t n,
                           shl_status_t *st)
{
    raw_batch_t b = {entries, n};
    int ret = 0;

    if (n == 0) {
        goto done;
    }
    SHL_ERR(shl_storage_write_retry(eng, write_raw_unit, &b, NULL, st));
    for (size_t i = 0; i < n; i++) {
        SHL_ERR(shl_oplog_apply(eng, entries[i], st));
        if (eng->opts.replay_derive != NULL) {
            SHL_ERR(eng->opts.replay_derive(eng, entries[i], eng->opts.replay_derive_arg, st));
        }
    }
done:
    if (n > 0) {
        shl_rs_state_notify(eng->oplog->rs);
    }
    return ret;
}

/* Entries removed per transaction when truncating, so no transaction grows large. */
#define OPLOG_TRUNCATE_BATCH 1000

/* The end of a removal from the oplog: the cursor back to the session, then (when 'ret' is 0)
 * the counts moved and the transaction committed, else aborted. Returns the outcome. */
static int
removal_end(shl_storage_txn_t *txn, WT_CURSOR *c, shl_rs_state_t *rs, int64_t gone,
            int64_t gone_bytes, int ret, shl_status_t *st)
{
    if (c != NULL) {
        c->reset(c);
        shl_wt_cursor_put(txn->sess, "table:oplog", c);
    }
    if (txn == NULL) {
        return ret;
    }
    if (ret == 0) {
        shl_txn_add_delta(txn, rs, -gone, -gone_bytes);
        ret = shl_storage_txn_commit(txn, st);
    } else {
        shl_storage_txn_abort(txn);
    }
    return ret;
}

/*
 * Remove up to one batch of the oldest entries. *more says whether another batch may be
 * needed (the batch filled up without reaching a stop condition).
 */
static int
truncate_batch(shl_storage_engine_t *eng, int64_t max_bytes, uint64_t upto, int64_t *removed,
               bool *more, shl_status_t *st)
{
    shl_storage_txn_t *txn = NULL;
    WT_CURSOR *c = NULL;
    shl_rs_state_t *rs = eng->oplog->rs;
    int64_t size = atomic_load(&rs->data_size), nrec = atomic_load(&rs->num_records);
    int64_t gone = 0, gone_bytes = 0;
    int ret = 0, wtret;

    *more = false;
    SHL_ERR(shl_storage_txn_begin(eng, NULL, &txn, st));
    SHL_ERR(shl_wt_cursor_get(eng, txn->sess, "table:oplog", &c, st));
    while (gone < OPLOG_TRUNCATE_BATCH && size - gone_bytes > max_bytes && nrec - gone > 1) {
        int64_t key;
        WT_ITEM val;
        if ((wtret = c->next(c)) != 0) {
            if (wtret != WT_NOTFOUND) {
                SHL_ERR(shl_wt_err(st, wtret, "oplog truncate scan"));
            }
            break;
        }
        if ((wtret = c->get_key(c, &key)) != 0 || (wtret = c->get_value(c, &val)) != 0) {
            SHL_ERR(shl_wt_err(st, wtret, "oplog truncate read"));
        }
        if ((uint64_t)key > upto) {
            break; /* recovery replays from here: keep it */
        }
        if ((wtret = c->remove(c)) != 0) {
            SHL_ERR(shl_wt_err(st, wtret, "oplog truncate remove"));
        }
        gone++;
        gone_bytes += (int64_t)val.size;
    }
    *more = gone == OPLOG_TRUNCATE_BATCH;
done:
    ret = removal_end(txn, c, rs, gone, gone_bytes, ret, st);
    if (ret == 0) {
        *removed += gone;
    }
    return ret;
}

/* True when the oplog value 'val' is an entry of the local database (a member's own). */
static bool
entry_is_local(const WT_ITEM *val)
{
    bson_t doc;
    bson_iter_t it;

    return bson_init_static(&doc, val->data, val->size) && bson_iter_init_find(&it, &doc, "ns") &&
           BSON_ITER_HOLDS_UTF8(&it) && strncmp(bson_iter_utf8(&it, NULL), "local.", 6) == 0;
}

int
shl_oplog_truncate_after(shl_storage_engine_t *eng, uint64_t after, int64_t *removed,
                         shl_status_t *st)
{
    shl_storage_txn_t *txn = NULL;
    WT_CURSOR *c = NULL;
    shl_rs_state_t *rs = eng->oplog->rs;
    int64_t gone = 0, gone_bytes = 0;
    int ret = 0, wtret, exact = 0;

    *removed = 0;
    SHL_ERR(shl_storage_txn_begin(eng, NULL, &txn, st));
    SHL_ERR(shl_wt_cursor_get(eng, txn->sess, "table:oplog", &c, st));
    c->set_key(c, (int64_t)after + 1);
    wtret = c->search_near(c, &exact);
    if (wtret == 0 && exact < 0) {
        wtret = c->next(c);
    }
    while (wtret == 0) {
        int64_t key;
        WT_ITEM val;
        if ((wtret = c->get_key(c, &key)) != 0 || (wtret = c->get_value(c, &val)) != 0) {
            SHL_ERR(shl_wt_err(st, wtret, "oplog tail read"));
        }
        if ((uint64_t)key > after && !entry_is_local(&val)) {
            if ((wtret = c->remove(c)) != 0) {
                SHL_ERR(shl_wt_err(st, wtret, "oplog tail remove"));
            }
            gone++;
            gone_bytes += (int64_t)val.size;
        }
        wtret = c->next(c);
    }
    if (wtret != WT_NOTFOUND) {
        SHL_ERR(shl_wt_err(st, wtret, "oplog tail scan"));
    }
done:
    ret = removal_end(txn, c, rs, gone, gone_bytes, ret, st);
    if (ret == 0) {
        *removed = gone;
    }
    return ret;
}

int
shl_oplog_truncate(shl_storage_engine_t *eng, int64_t max_bytes, uint64_t upto, int64_t *removed,
                   shl_status_t *st)
{
    bool more = true;
    int ret = 0;

    *removed = 0;
    while (more && ret == 0) {
        ret = truncate_batch(eng, max_bytes, upto, removed, &more, st);
        if (ret == SHL_CODE_WRITE_CONFLICT) {
            shl_status_clear(st);
            ret = 0;
            more = false; /* a concurrent reader or writer: try again after the next checkpoint */
        }
    }
    return ret;
}
