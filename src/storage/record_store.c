/*
 * record_store.c -- documents by RecordId in `collection-<n>` tables (and the oplog as
 * local.oplog.rs, RecordId = ts): point reads, raw writes with count/size deltas, and
 * scan cursors. See record_store.h.
 */
#include "storage/storage_private.h"

#include <string.h>

#include "storage/record_store.h"

static int
check_writable(shl_storage_txn_t *txn, const shl_collection_t *coll, shl_status_t *st)
{
    if (coll->is_oplog) {
        return shl_status_set(st, SHL_CODE_ILLEGAL_OPERATION, "cannot write to '%s' directly",
                              coll->ns);
    }
    /* Unlogged tables are recovered from stable checkpoints: an untimestamped write
     * would leak into a checkpoint ahead of the oplog. A multi-document transaction's
     * writes take its commit timestamp when it commits. */
    SHL_INVARIANT(txn->cur_ts != 0 || txn->multi);
    return 0;
}

int
shl_record_get(shl_storage_txn_t *txn, const shl_collection_t *coll, int64_t rid, bson_t *out,
               bool *found, shl_status_t *st)
{
    WT_CURSOR *c = NULL;
    WT_ITEM v;
    int ret = 0, wtret;

    bson_init(out);
    *found = false;
    SHL_ERR(shl_wt_cursor_get(txn->eng, txn->sess, coll->uri, &c, st));
    c->set_key(c, rid);
    SHL_WT_READ(wtret, c->search(c));
    if (wtret == 0) {
        wtret = c->get_value(c, &v);
        if (wtret == 0) {
            bson_t view;
            if (!bson_init_static(&view, v.data, v.size)) {
                SHL_FAIL(st, SHL_CODE_INTERNAL_ERROR, "corrupt record %lld in %s", (long long)rid,
                         coll->ns);
            }
            /* Copy out of WT's memory: valid after the cursor moves. */
            bson_destroy(out);
            bson_copy_to(&view, out);
            *found = true;
        }
    }
    if (wtret != 0 && wtret != WT_NOTFOUND) {
        SHL_ERR(shl_wt_err(st, wtret, "record read"));
    }
done:
    if (c != NULL) {
        shl_wt_cursor_put(txn->sess, coll->uri, c);
    }
    return ret;
}

int
shl_record_insert_at(shl_storage_txn_t *txn, const shl_collection_t *coll, int64_t rid,
                     const bson_t *doc, shl_status_t *st)
{
    WT_CURSOR *c = NULL;
    WT_ITEM v = {.data = bson_get_data(doc), .size = doc->len};
    int ret = 0, wtret;

    SHL_ERR(check_writable(txn, coll, st));
    SHL_ERR(shl_wt_cursor_get(txn->eng, txn->sess, coll->uri, &c, st));
    c->set_key(c, rid);
    c->set_value(c, &v);
    wtret = c->insert(c);
    if (wtret == WT_DUPLICATE_KEY) {
        SHL_FAIL(st, SHL_CODE_INTERNAL_ERROR, "RecordId %lld already exists in %s", (long long)rid,
                 coll->ns);
    }
    if (wtret != 0) {
        SHL_ERR(shl_wt_err(st, wtret, "record insert"));
    }
    shl_txn_add_delta(txn, coll->rs, 1, doc->len);
done:
    if (c != NULL) {
        shl_wt_cursor_put(txn->sess, coll->uri, c);
    }
    return ret;
}

int
shl_record_insert(shl_storage_txn_t *txn, const shl_collection_t *coll, const bson_t *doc,
                  int64_t *rid, shl_status_t *st)
{
    int ret = 0;
    int64_t r;

    SHL_ERR(check_writable(txn, coll, st));
    r = atomic_fetch_add(&coll->rs->next_rid, 1);
    SHL_ERR(shl_record_insert_at(txn, coll, r, doc, st));
    if (rid != NULL) {
        *rid = r;
    }
done:
    return ret;
}

/* Position 'c' on 'rid' and return the current value's size. */
static int
seek_existing(WT_CURSOR *c, const shl_collection_t *coll, int64_t rid, size_t *size,
              shl_status_t *st)
{
    WT_ITEM v;
    int ret = 0, wtret;

    c->set_key(c, rid);
    SHL_WT_READ(wtret, c->search(c));
    if (wtret == WT_NOTFOUND) {
        SHL_FAIL(st, SHL_CODE_NO_SUCH_KEY, "RecordId %lld not found in %s", (long long)rid,
                 coll->ns);
    }
    if (wtret == 0) {
        wtret = c->get_value(c, &v);
    }
    if (wtret != 0) {
        SHL_ERR(shl_wt_err(st, wtret, "record search"));
    }
    *size = v.size;
done:
    return ret;
}

int
shl_record_update(shl_storage_txn_t *txn, const shl_collection_t *coll, int64_t rid,
                  const bson_t *doc, shl_status_t *st)
{
    WT_CURSOR *c = NULL;
    WT_ITEM v = {.data = bson_get_data(doc), .size = doc->len};
    size_t old = 0;
    int ret = 0, wtret;

    SHL_ERR(check_writable(txn, coll, st));
    SHL_ERR(shl_wt_cursor_get(txn->eng, txn->sess, coll->uri, &c, st));
    /* Positioned by the search: WiredTiger updates in place without searching again. */
    SHL_ERR(seek_existing(c, coll, rid, &old, st));
    c->set_value(c, &v);
    wtret = c->update(c);
    if (wtret != 0) {
        SHL_ERR(shl_wt_err(st, wtret, "record update"));
    }
    shl_txn_add_delta(txn, coll->rs, 0, (int64_t)doc->len - (int64_t)old);
done:
    if (c != NULL) {
        shl_wt_cursor_put(txn->sess, coll->uri, c);
    }
    return ret;
}

int
shl_record_delete(shl_storage_txn_t *txn, const shl_collection_t *coll, int64_t rid,
                  shl_status_t *st)
{
    WT_CURSOR *c = NULL;
    size_t old = 0;
    int ret = 0, wtret;

    SHL_ERR(check_writable(txn, coll, st));
    SHL_ERR(shl_wt_cursor_get(txn->eng, txn->sess, coll->uri, &c, st));
    /* Positioned by the search: WiredTiger removes in place without searching again. */
    SHL_ERR(seek_existing(c, coll, rid, &old, st));
    wtret = c->remove(c);
    if (wtret != 0) {
        SHL_ERR(shl_wt_err(st, wtret, "record delete"));
    }
    shl_txn_add_delta(txn, coll->rs, -1, -(int64_t)old);
done:
    if (c != NULL) {
        shl_wt_cursor_put(txn->sess, coll->uri, c);
    }
    return ret;
}

/* ---------------------------------------------------------------------------------
 * Scan cursors
 * ------------------------------------------------------------------------------ */

struct shl_record_cursor {
    shl_storage_txn_t *txn;
    WT_CURSOR *c;
    char *uri;
    bool forward;
    bool positioned; /* the next call continues from the WT cursor's position */
    bool seek_pending;
    int64_t seek_rid;
    bool bounded; /* oplog: RecordIds above 'bound' are invisible */
    int64_t bound;
    bool eof;
};

int
shl_record_cursor_open(shl_storage_txn_t *txn, const shl_collection_t *coll, bool forward,
                       shl_record_cursor_t **out, shl_status_t *st)
{
    shl_record_cursor_t *rc = bson_malloc0(sizeof(*rc));
    int ret = 0;

    *out = NULL;
    rc->txn = txn;
    rc->forward = forward;
    if (coll->is_oplog) {
        /* Never show an entry while an earlier timestamp may still commit. */
        rc->bounded = true;
        rc->bound = (int64_t)shl_storage_all_durable(txn->eng);
    }
    /* From the session's cache: several may be open on one table at once. */
    SHL_ERR(shl_wt_cursor_get(txn->eng, txn->sess, coll->uri, &rc->c, st));
    rc->uri = bson_strdup(coll->uri);
    txn->open_cursors++;
    *out = rc;
    rc = NULL;
done:
    bson_free(rc);
    return ret;
}

void
shl_record_cursor_seek(shl_record_cursor_t *rc, int64_t rid)
{
    rc->seek_pending = true;
    rc->seek_rid = rid;
    rc->eof = false;
}

int
shl_record_cursor_next(shl_record_cursor_t *rc, int64_t *rid, bson_t *doc, bool *eof,
                       shl_status_t *st)
{
    WT_CURSOR *c = rc->c;
    WT_ITEM v;
    int64_t key = 0;
    int ret = 0, wtret, exact = 0;

    *eof = false;
    if (rc->eof) {
        *eof = true;
        goto done;
    }
    if (rc->seek_pending) {
        rc->seek_pending = false;
        c->set_key(c, rc->seek_rid);
        SHL_WT_READ(wtret, c->search_near(c, &exact));
        if (wtret == 0 && ((rc->forward && exact < 0) || (!rc->forward && exact > 0))) {
            SHL_WT_READ(wtret, rc->forward ? c->next(c) : c->prev(c));
        }
    } else if (!rc->positioned && !rc->forward && rc->bounded) {
        c->set_key(c, rc->bound);
        SHL_WT_READ(wtret, c->search_near(c, &exact));
        if (wtret == 0 && exact > 0) {
            SHL_WT_READ(wtret, c->prev(c));
        }
    } else {
        SHL_WT_READ(wtret, rc->forward ? c->next(c) : c->prev(c));
    }
    rc->positioned = true;
    if (wtret == 0) {
        wtret = c->get_key(c, &key);
    }
    if (wtret == 0 && rc->bounded && key > rc->bound) {
        if (rc->forward) {
            wtret = WT_NOTFOUND;
        } else {
            /* A reverse seek landed above the bound: step down to it. */
            while (wtret == 0 && key > rc->bound) {
                SHL_WT_READ(wtret, c->prev(c));
                if (wtret == 0) {
                    wtret = c->get_key(c, &key);
                }
            }
        }
    }
    if (wtret == WT_NOTFOUND) {
        rc->eof = *eof = true;
        goto done;
    }
    if (wtret == 0) {
        wtret = c->get_value(c, &v);
    }
    if (wtret != 0) {
        SHL_ERR(shl_wt_err(st, wtret, "record cursor"));
    }
    if (!bson_init_static(doc, v.data, v.size)) {
        SHL_FAIL(st, SHL_CODE_INTERNAL_ERROR, "corrupt record %lld", (long long)key);
    }
    *rid = key;
done:
    return ret;
}

void
shl_record_cursor_close(shl_record_cursor_t *rc)
{
    if (rc == NULL) {
        return;
    }
    shl_wt_cursor_put(rc->txn->sess, rc->uri, rc->c);
    rc->txn->open_cursors--;
    bson_free(rc->uri);
    bson_free(rc);
}
