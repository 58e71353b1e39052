/*
 * tail_cursor.c -- see tail_cursor.h. A round is one storage transaction and one record
 * cursor; it ends at the end of the data (the source then reports exhaustion, which a
 * tailable cursor survives) and the next call starts a new round after last_rid.
 */
#include "bson/bson_iter.h"
#include "db/tail_cursor.h"

#include <string.h>

#include "base/clock.h"
#include "db/db_private.h"

typedef struct tail_source {
    shl_storage_engine_t *eng;
    shl_collection_t *coll; /* reference */
    exec_query_t *q;        /* owned */
    int64_t start_rid;      /* first round seeks here (oplog ts); 0: from the start */
    int64_t last_rid;       /* last record examined, matched or not; 0: none yet */
    int64_t to_skip;        /* matching documents still to skip */
    shl_storage_txn_t *txn; /* the current round, NULL between rounds */
    shl_record_cursor_t *cur;
    bson_t out; /* the projected document */
    bool has_out;
} tail_source_t;

/* {ts: {$gt|$gte|$eq: T}} on the oplog: the first entry a reader can want. */
static int64_t
oplog_start(const bson_t *filter)
{
    bson_iter_t it, sub;
    int64_t min_rid = 0;

    if (!bson_iter_init_find(&it, filter, "ts") || !BSON_ITER_HOLDS_DOCUMENT(&it) ||
        !bson_iter_recurse(&it, &sub)) {
        return 0;
    }
    while (shl_iter_next(&sub)) {
        uint32_t t, i;
        const char *k = shl_iter_key(&sub);
        if (!BSON_ITER_HOLDS_TIMESTAMP(&sub)) {
            continue;
        }
        bson_iter_timestamp(&sub, &t, &i);
        if (strcmp(k, "$gte") == 0 || strcmp(k, "$eq") == 0) {
            min_rid = (int64_t)SHL_TS_MAKE(t, i);
        } else if (strcmp(k, "$gt") == 0) {
            min_rid = (int64_t)SHL_TS_MAKE(t, i) + 1;
        }
    }
    return min_rid;
}

void *
db_tail_source_new(shl_storage_engine_t *eng, shl_collection_t *coll, exec_query_t *q)
{
    tail_source_t *t = bson_aligned_alloc0(BSON_ALIGNOF(tail_source_t), sizeof(*t));
    t->eng = eng;
    t->coll = shl_collection_ref(coll);
    t->q = q;
    t->to_skip = q->skip;
    if (coll->is_oplog) {
        t->start_rid = oplog_start(&q->filter);
    }
    return t;
}

const shl_collection_t *
db_tail_source_coll(const void *state)
{
    return ((const tail_source_t *)state)->coll;
}

static void
end_round(tail_source_t *t)
{
    shl_record_cursor_close(t->cur);
    t->cur = NULL;
    shl_storage_txn_abort(t->txn);
    t->txn = NULL;
}

void
db_tail_source_end_round(void *state)
{
    end_round(state);
}

static int
begin_round(tail_source_t *t, shl_status_t *st)
{
    int ret = 0;
    int64_t rid = 0;
    bson_t doc;
    bool eof = false;

    SHL_ERR(shl_storage_txn_begin(t->eng, NULL, &t->txn, st));
    SHL_ERR(shl_record_cursor_open(t->txn, t->coll, true, &t->cur, st));
    if (t->last_rid > 0) {
        /* Resume at the record we stopped at; if it is gone, documents between it and
         * the oldest one left were never seen. */
        shl_record_cursor_seek(t->cur, t->last_rid);
        SHL_ERR(shl_record_cursor_next(t->cur, &rid, &doc, &eof, st));
        if (eof || rid != t->last_rid) {
            SHL_FAIL(st, SHL_CODE_CAPPED_POSITION_LOST,
                     "CollectionScan died due to position in capped collection being deleted. "
                     "Last seen record id: RecordId(%lld)",
                     (long long)t->last_rid);
        }
    } else if (t->start_rid > 0) {
        shl_record_cursor_seek(t->cur, t->start_rid);
    }
done:
    if (ret != 0) {
        end_round(t);
    }
    return ret;
}

static int
tail_next(void *state, shl_op_ctx_t *op, const bson_t **doc, shl_status_t *st)
{
    tail_source_t *t = state;
    int ret = 0;
    int64_t examined = 0;

    *doc = NULL;
    if (t->cur == NULL) {
        SHL_ERR(begin_round(t, st));
    }
    for (;;) {
        int64_t rid;
        bson_t d;
        bool eof = false, matched = true;
        shl_match_details_t details;

        if ((++examined & 1023) == 0) {
            SHL_ERR(shl_op_check_interrupt(op, st));
        }
        SHL_ERR(shl_record_cursor_next(t->cur, &rid, &d, &eof, st));
        if (eof) {
            end_round(t);
            break;
        }
        t->last_rid = rid;
        memset(&details, 0, sizeof(details));
        if (t->q->matcher != NULL) {
            SHL_ERR(shl_matcher_match(t->q->matcher, &d, &details, &matched, st));
        }
        if (!matched || !shl_db_orphan_filter_owns(t->q->orphan_filter, &d)) {
            continue;
        }
        if (t->to_skip > 0) {
            t->to_skip--;
            continue;
        }
        if (t->q->proj == NULL) {
            /* A view into the record cursor: valid until the next call. Made with
             * bson_init_static, never by assignment: a static bson_t points into itself, so a
             * copy of 'd' would point into this stack frame once it returns. */
            if (t->has_out) {
                bson_destroy(&t->out);
                t->has_out = false;
            }
            bson_init_static(&t->out, bson_get_data(&d), d.len);
            *doc = &t->out;
            break;
        }
        if (t->has_out) {
            bson_destroy(&t->out);
            t->has_out = false;
        }
        ret = shl_projection_apply(t->q->proj, &d, &details, NULL, &t->out, st);
        t->has_out = true;
        SHL_ERR(ret);
        *doc = &t->out;
        break;
    }
done:
    if (ret != 0) {
        end_round(t);
    }
    return ret;
}

static void
tail_destroy(void *state)
{
    tail_source_t *t = state;
    end_round(t);
    if (t->has_out) {
        bson_destroy(&t->out);
    }
    shl_collection_release(t->coll);
    exec_query_cleanup(t->q);
    bson_free(t->q);
    bson_free(t);
}

const shl_cursor_source_ops_t db_tail_cursor_ops = {tail_next, tail_destroy};
