/*
 * txn.c -- storage transactions (write units and snapshot reads): one pooled WT session
 * running one snapshot-isolation transaction, the timestamps its writes take, and what
 * happens at commit (count/size deltas, catalog swaps, deferred drops) or abort.
 * DESIGN.md section 5; docs/design/storage.md "Timestamps".
 */
#include "storage/storage_private.h"

#include <inttypes.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/log.h"
#include "storage/write.h"

int
shl_storage_txn_begin(shl_storage_engine_t *eng, const shl_storage_txn_opts_t *opts,
                      shl_storage_txn_t **out, shl_status_t *st)
{
    shl_storage_txn_t *txn = bson_malloc0(sizeof(*txn));
    char cfg[64];
    int ret = 0, wtret;

    *out = NULL;
    txn->eng = eng;
    SHL_ERR(shl_wt_session_get(eng, &txn->sess, st));
    cfg[0] = '\0';
    if (opts != NULL && opts->read_timestamp != 0) {
        snprintf(cfg, sizeof(cfg), "read_timestamp=%" PRIx64, opts->read_timestamp);
    }
    if (opts != NULL && opts->ignore_prepare) {
        snprintf(cfg + strlen(cfg), sizeof(cfg) - strlen(cfg), "%signore_prepare=true",
                 cfg[0] != '\0' ? "," : "");
    }
    wtret = txn->sess->wt->begin_transaction(txn->sess->wt, cfg);
    if (wtret != 0) {
        if (opts != NULL && opts->read_timestamp != 0 && wtret == EINVAL) {
            SHL_FAIL(st, SHL_CODE_SNAPSHOT_TOO_OLD,
                     "Read timestamp Timestamp(%" PRIu32 ", %" PRIu32 ") is older than the oldest "
                     "available timestamp.",
                     SHL_TS_SECS(opts->read_timestamp), SHL_TS_INC(opts->read_timestamp));
        }
        SHL_ERR(shl_wt_err(st, wtret, "begin_transaction"));
    }
    *out = txn;
    txn = NULL;
done:
    if (txn != NULL) {
        shl_wt_session_put(eng, txn->sess);
        bson_free(txn);
    }
    return ret;
}

shl_storage_engine_t *
shl_storage_txn_engine(const shl_storage_txn_t *txn)
{
    return txn->eng;
}

uint64_t
shl_storage_txn_last_ts(const shl_storage_txn_t *txn)
{
    return txn->last_ts;
}

int
shl_txn_set_ts(shl_storage_txn_t *txn, uint64_t ts, shl_status_t *st)
{
    char cfg[64];
    int ret = 0, wtret;

    if (txn->cur_ts == ts) {
        goto done;
    }
    snprintf(cfg, sizeof(cfg), "commit_timestamp=%" PRIx64, ts);
    wtret = txn->sess->wt->timestamp_transaction(txn->sess->wt, cfg);
    if (wtret != 0) {
        SHL_ERR(shl_wt_err(st, wtret, "timestamp_transaction"));
    }
    txn->cur_ts = ts;
done:
    return ret;
}

int
shl_txn_next_ts(shl_storage_txn_t *txn, uint64_t *ts, shl_status_t *st)
{
    int ret = 0;
    uint64_t t;

    if (txn->multi) {
        /* A multi-document transaction's writes take its commit timestamp when it commits
         * (WiredTiger stamps untimestamped updates with it). */
        *ts = 0;
        goto done;
    }
    if (txn->fixed_ts != 0) {
        t = txn->fixed_ts;
        txn->wall_ms = txn->fixed_wall_ms != 0 ? txn->fixed_wall_ms : shl_clock_wall_ms();
    } else {
        /* WiredTiger 3.2 accepts several increasing commit timestamps in one
         * transaction (each update takes the current one), as MongoDB uses for
         * batched inserts: every document gets its own oplog slot. */
        int wtret = 0;
        t = shl_clock_reserve(txn->eng, &txn->inflight, &txn->wall_ms, txn->sess->wt, &wtret);
        if (wtret != 0) {
            SHL_ERR(shl_wt_err(st, wtret, "timestamp_transaction"));
        }
        txn->cur_ts = t;
    }
    SHL_ERR(shl_txn_set_ts(txn, t, st));
    txn->last_ts = t;
    *ts = t;
done:
    return ret;
}

int
shl_storage_txn_tick(shl_storage_txn_t *txn, uint64_t *ts, shl_status_t *st)
{
    uint64_t t;
    int ret = shl_txn_next_ts(txn, &t, st);
    if (ts != NULL) {
        *ts = ret == 0 ? t : 0;
    }
    return ret;
}

void
shl_txn_add_delta(shl_storage_txn_t *txn, shl_rs_state_t *rs, int64_t count, int64_t size)
{
    for (size_t i = 0; i < txn->ndeltas; i++) {
        if (txn->deltas[i].rs == rs) {
            txn->deltas[i].count += count;
            txn->deltas[i].size += size;
            return;
        }
    }
    if (txn->ndeltas == txn->capdeltas) {
        txn->capdeltas = txn->capdeltas ? txn->capdeltas * 2 : 4;
        txn->deltas = bson_realloc(txn->deltas, txn->capdeltas * sizeof(*txn->deltas));
    }
    atomic_fetch_add(&rs->refs, 1);
    txn->deltas[txn->ndeltas].rs = rs;
    txn->deltas[txn->ndeltas].count = count;
    txn->deltas[txn->ndeltas].size = size;
    txn->ndeltas++;
}

void
shl_txn_add_change(shl_storage_txn_t *txn, const char *ns, shl_collection_t *coll)
{
    if (txn->nchanges == txn->capchanges) {
        txn->capchanges = txn->capchanges ? txn->capchanges * 2 : 4;
        txn->changes = bson_realloc(txn->changes, txn->capchanges * sizeof(*txn->changes));
    }
    txn->changes[txn->nchanges].ns = bson_strdup(ns);
    txn->changes[txn->nchanges].coll = coll;
    txn->nchanges++;
}

const shl_cat_change_t *
shl_txn_find_change(const shl_storage_txn_t *txn, const char *ns)
{
    /* The latest change to 'ns' in this transaction wins. */
    for (size_t i = txn->nchanges; i > 0; i--) {
        if (strcmp(txn->changes[i - 1].ns, ns) == 0) {
            return &txn->changes[i - 1];
        }
    }
    return NULL;
}

static void
add_ident(shl_drop_ident_t **arr, size_t *n, size_t *cap, const char *uri, uint64_t ts)
{
    if (*n == *cap) {
        *cap = *cap ? *cap * 2 : 4;
        *arr = bson_realloc(*arr, *cap * sizeof(**arr));
    }
    (*arr)[*n].uri = bson_strdup(uri);
    (*arr)[*n].drop_ts = ts;
    (*n)++;
}

void
shl_txn_add_created(shl_storage_txn_t *txn, const char *uri)
{
    add_ident(&txn->created, &txn->ncreated, &txn->capcreated, uri, 0);
}

void
shl_txn_add_dropped(shl_storage_txn_t *txn, const char *uri, uint64_t ts)
{
    add_ident(&txn->dropped, &txn->ndropped, &txn->capdropped, uri, ts);
}

/* Free the transaction's bookkeeping; 'committed' decides what happens to it. */
static void
txn_finish(shl_storage_txn_t *txn, bool committed)
{
    shl_storage_engine_t *eng = txn->eng;
    shl_status_t st;

    if (committed) {
        for (size_t i = 0; i < txn->ndeltas; i++) {
            atomic_fetch_add(&txn->deltas[i].rs->num_records, txn->deltas[i].count);
            atomic_fetch_add(&txn->deltas[i].rs->data_size, txn->deltas[i].size);
        }
        /* The caller still holds the collection locks, so nobody sees the catalog
         * between the WT commit and this swap. */
        for (size_t i = 0; i < txn->nchanges; i++) {
            shl_catalog_install(eng, txn->changes[i].ns, txn->changes[i].coll);
        }
        shl_engine_queue_drops(eng, txn->dropped, txn->ndropped);
    }
    /* The no-holes point may pass our timestamps only once the commit (or abort)
     * is complete. */
    shl_clock_finish(eng, &txn->inflight);
    /* Wake tailable readers only now that the no-holes point may have moved. A
     * transaction that reserved a timestamp may have held back oplog readers even if it
     * aborted or wrote nothing of its own. */
    if (committed) {
        for (size_t i = 0; i < txn->ndeltas; i++) {
            shl_rs_state_notify(txn->deltas[i].rs);
        }
    }
    if (txn->last_ts != 0 && txn->fixed_ts == 0 && eng->oplog != NULL) {
        shl_rs_state_notify(eng->oplog->rs);
    }
    shl_wt_session_put(eng, txn->sess);
    txn->sess = NULL;
    if (!committed) {
        /* Tables created by an aborted DDL are not named by any catalog entry. */
        for (size_t i = 0; i < txn->ncreated; i++) {
            if (shl_engine_drop_now(eng, txn->created[i].uri, &st) != 0) {
                shl_engine_queue_drops(eng, &txn->created[i], 1);
            }
        }
    }
    for (size_t i = 0; i < txn->ndeltas; i++) {
        shl_rs_state_release(txn->deltas[i].rs);
    }
    for (size_t i = 0; i < txn->nchanges; i++) {
        bson_free(txn->changes[i].ns);
        shl_collection_release(txn->changes[i].coll);
    }
    for (size_t i = 0; i < txn->ncreated; i++) {
        bson_free(txn->created[i].uri);
    }
    for (size_t i = 0; i < txn->ndropped; i++) {
        bson_free(txn->dropped[i].uri);
    }
    for (size_t i = 0; i < txn->nops; i++) {
        bson_destroy(txn->ops[i]);
        if (txn->op_pres[i] != NULL) {
            bson_destroy(txn->op_pres[i]);
        }
    }
    bson_free(txn->ops);
    bson_free(txn->op_pres);
    bson_free(txn->deltas);
    bson_free(txn->changes);
    bson_free(txn->created);
    bson_free(txn->dropped);
    bson_free(txn);
}

int
shl_storage_txn_commit(shl_storage_txn_t *txn, shl_status_t *st)
{
    int ret = 0, wtret;

    SHL_INVARIANT(txn->open_cursors == 0);
    wtret = txn->sess->wt->commit_transaction(txn->sess->wt, NULL);
    if (wtret != 0) {
        ret = shl_wt_err(st, wtret, "commit_transaction");
    }
    txn_finish(txn, ret == 0);
    return ret;
}

void
shl_storage_txn_abort(shl_storage_txn_t *txn)
{
    if (txn == NULL) {
        return;
    }
    SHL_INVARIANT(txn->open_cursors == 0);
    txn->sess->wt->rollback_transaction(txn->sess->wt, NULL);
    txn_finish(txn, false);
}

int
shl_storage_write_retry(shl_storage_engine_t *eng, shl_storage_txn_fn fn, void *arg,
                        uint64_t *last_ts, shl_status_t *st)
{
    shl_storage_txn_t *txn = NULL;
    int ret = 0;
    uint64_t ts = 0;

    for (int attempt = 0;; attempt++) {
        ret = shl_storage_txn_begin(eng, NULL, &txn, st);
        if (ret != 0) {
            break;
        }
        ret = fn(txn, arg, st);
        if (ret == 0) {
            ts = shl_storage_txn_last_ts(txn);
            ret = shl_storage_txn_commit(txn, st);
        } else {
            shl_storage_txn_abort(txn);
        }
        txn = NULL;
        if (ret != SHL_CODE_WRITE_CONFLICT) {
            break;
        }
        /* Back off like MongoDB's writeConflictRetry: spin a little, then sleep
         * longer and longer (capped at 100 ms) with jitter so the losers spread out. */
        if (attempt < 4) {
            sched_yield();
        } else {
            int64_t cap = attempt >= 11 ? 100 : (int64_t)1 << (attempt - 4);
            shl_sleep_ms(1 + (int64_t)(random() % (cap > 100 ? 100 : cap)));
        }
        if (attempt == 100) {
            SHL_LOG_WARNING(STORAGE, 22375, "Write conflict retries keep failing", "attempts",
                            BCON_INT32(attempt));
        }
    }
    if (last_ts != NULL) {
        *last_ts = ret == 0 ? ts : 0;
    }
    return ret;
}

/* The interruption check of the operation this thread runs (shl_storage_set_interrupt) and
 * the status it gave, which a prepare-conflict wait it ended reports. */
static _Thread_local int (*tl_interrupt)(void *arg, shl_status_t *st);
static _Thread_local void *tl_interrupt_arg;
static _Thread_local shl_status_t tl_interrupt_st;

void
shl_storage_set_interrupt(int (*fn)(void *arg, shl_status_t *st), void *arg)
{
    tl_interrupt = fn;
    tl_interrupt_arg = arg;
}

bool
shl_prepare_interrupted(shl_status_t *st)
{
    if (tl_interrupt_st.code == 0) {
        return false;
    }
    *st = tl_interrupt_st;
    shl_status_clear(&tl_interrupt_st);
    return true;
}

bool
shl_prepare_backoff(int *attempt)
{
    if (tl_interrupt != NULL && tl_interrupt(tl_interrupt_arg, &tl_interrupt_st) != 0) {
        return false;
    }
    if (*attempt < 4) {
        sched_yield();
    } else {
        int64_t ms = (int64_t)1 << (*attempt - 4 < 7 ? *attempt - 4 : 7);
        shl_sleep_ms(ms > 100 ? 100 : ms);
    }
    (*attempt)++;
    return true;
}

void
shl_storage_txn_set_multi(shl_storage_txn_t *txn, bool on)
{
    txn->multi = on;
}

bool
shl_storage_txn_is_multi(const shl_storage_txn_t *txn)
{
    return txn->multi;
}

void
shl_txn_collect_op(shl_storage_txn_t *txn, char op, const char *ns, const uint8_t *uuid,
                   const bson_t *o, const bson_t *o2)
{
    bson_t *e = bson_new();
    char ops[2] = {op, '\0'};

    BSON_APPEND_UTF8(e, "op", ops);
    BSON_APPEND_UTF8(e, "ns", ns);
    if (uuid != NULL) {
        bson_append_binary(e, "ui", 2, BSON_SUBTYPE_UUID, uuid, 16);
    }
    BSON_APPEND_DOCUMENT(e, "o", o);
    if (o2 != NULL) {
        BSON_APPEND_DOCUMENT(e, "o2", o2);
    }
    if (txn->nops == txn->capops) {
        txn->capops = txn->capops ? txn->capops * 2 : 8;
        txn->ops = bson_realloc(txn->ops, txn->capops * sizeof(*txn->ops));
        txn->op_pres = bson_realloc(txn->op_pres, txn->capops * sizeof(*txn->op_pres));
    }
    txn->op_pres[txn->nops] = NULL;
    txn->ops[txn->nops++] = e;
    txn->ops_bytes += e->len;
}

void
shl_txn_keep_pre_image(shl_storage_txn_t *txn, const bson_t *before)
{
    SHL_INVARIANT(txn->nops > 0 && txn->op_pres[txn->nops - 1] == NULL);
    txn->op_pres[txn->nops - 1] = bson_copy(before);
}

const bson_t *const *
shl_storage_txn_ops(const shl_storage_txn_t *txn, size_t *n, size_t *bytes)
{
    *n = txn->nops;
    if (bytes != NULL) {
        *bytes = txn->ops_bytes;
    }
    return (const bson_t *const *)txn->ops;
}

int
shl_storage_txn_reserve(shl_storage_txn_t *txn, uint64_t *ts, shl_status_t *st)
{
    (void)st;
    *ts = shl_clock_reserve(txn->eng, &txn->inflight, &txn->wall_ms, NULL, NULL);
    return 0;
}

void
shl_storage_txn_release_reserved(shl_storage_txn_t *txn)
{
    shl_clock_finish(txn->eng, &txn->inflight);
}

void
shl_storage_txn_set_fixed_ts(shl_storage_txn_t *txn, uint64_t ts)
{
    txn->fixed_ts = ts;
    txn->wall_ms = shl_clock_wall_ms();
}

int
shl_storage_txn_prepare(shl_storage_txn_t *txn, uint64_t prepare_ts, shl_status_t *st)
{
    char cfg[64];
    int ret = 0, wtret;

    SHL_INVARIANT(txn->open_cursors == 0);
    snprintf(cfg, sizeof(cfg), "prepare_timestamp=%" PRIx64, prepare_ts);
    wtret = txn->sess->wt->prepare_transaction(txn->sess->wt, cfg);
    if (wtret != 0) {
        SHL_ERR(shl_wt_err(st, wtret, "prepare_transaction"));
    }
    txn->prepared = true;
done:
    return ret;
}

int
shl_storage_txn_commit_at(shl_storage_txn_t *txn, uint64_t commit_ts, uint64_t durable_ts,
                          shl_status_t *st)
{
    char cfg[96];
    int ret = 0, wtret;

    SHL_INVARIANT(txn->open_cursors == 0);
    if (txn->prepared) {
        snprintf(cfg, sizeof(cfg), "commit_timestamp=%" PRIx64 ",durable_timestamp=%" PRIx64,
                 commit_ts, durable_ts != 0 ? durable_ts : commit_ts);
    } else {
        snprintf(cfg, sizeof(cfg), "commit_timestamp=%" PRIx64, commit_ts);
    }
    wtret = txn->sess->wt->commit_transaction(txn->sess->wt, cfg);
    if (wtret != 0) {
        ret = shl_wt_err(st, wtret, "commit_transaction");
    }
    txn_finish(txn, ret == 0);
    return ret;
}

int
shl_storage_txn_snapshot(shl_storage_txn_t *txn, shl_status_t *st)
{
    WT_CURSOR *c = NULL;
    int ret = 0, wtret;

    /* Any read allocates the snapshot: one point lookup of a key no namespace has in the
     * small catalog table (a scan of the oplog could walk truncated entries). */
    SHL_ERR(shl_wt_cursor_get(txn->eng, txn->sess, "table:_catalog", &c, st));
    c->set_key(c, "");
    wtret = c->search(c);
    if (wtret != 0 && wtret != WT_NOTFOUND) {
        SHL_ERR(shl_wt_err(st, wtret, "snapshot"));
    }
done:
    if (c != NULL) {
        c->reset(c);
        shl_wt_cursor_put(txn->sess, "table:_catalog", c);
    }
    return ret;
}
