/*
 * oplog.c -- oplog entries in MongoDB's format, readers bounded by the no-holes point,
 * and idempotent application of entries (startup recovery). See oplog.h.
 */
#include "bson/bson_iter.h"
#include "storage/storage_private.h"

#include <string.h>

#include "base/log.h"
#include "storage/oplog.h"
#include "bson/bson_util.h"
#include "storage/record_store.h"
#include "storage/write.h"

void
shl_oplog_entry_build(bson_t *out, char op, const char *ns, const uint8_t *uuid, const bson_t *o,
                      const bson_t *o2, uint64_t ts, int64_t term, int64_t wall_ms,
                      const bson_t *extra)
{
    char opstr[2] = {op, '\0'};

    bson_init(out);
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
} apply_arg_t;

static int
apply_crud(shl_storage_txn_t *txn, void *varg, shl_status_t *st)
{
    apply_arg_t *a = varg;
    bson_iter_t it;
    bson_t cur;
    int64_t rid = 0;
    bool found = false;
    int ret = 0;

    bson_init(&cur);
    txn->fixed_ts = a->ts;
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
        {
            bson_iter_t first;
            if (bson_iter_init(&first, &a->o) && shl_iter_next(&first) &&
                shl_iter_key(&first)[0] == '$') {
                SHL_FAIL(st, SHL_CODE_BAD_VALUE, "only replacement-style updates can be applied");
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

/* Entries removed per transaction when truncating, so no transaction grows large. */
#define OPLOG_TRUNCATE_BATCH 1000

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
    shl_txn_add_delta(txn, rs, -gone, -gone_bytes);
    c->reset(c);
    shl_wt_cursor_put(txn->sess, "table:oplog", c);
    c = NULL;
    SHL_ERR(shl_storage_txn_commit(txn, st));
    txn = NULL;
    *removed += gone;
done:
    if (c != NULL) {
        c->reset(c);
        shl_wt_cursor_put(txn->sess, "table:oplog", c);
    }
    if (txn != NULL) {
        shl_storage_txn_abort(txn);
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
