/*
 * recovery.c -- startup recovery (DESIGN.md section 5): WiredTiger has already rolled
 * the logged oplog forward to the end of the journal and the unlogged tables back to
 * the last stable checkpoint; here we replay every oplog entry after that checkpoint's
 * timestamp (idempotently), take a stable checkpoint, and drop tables no catalog entry
 * names (left by DDL that never became durable).
 */
#include "storage/storage_private.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "storage/oplog.h"

static int
query_ts(shl_storage_engine_t *eng, const char *what, uint64_t *ts, shl_status_t *st)
{
    char buf[32], cfg[32];
    int wtret;

    snprintf(cfg, sizeof(cfg), "get=%s", what);
    *ts = 0;
    wtret = eng->conn->query_timestamp(eng->conn, buf, cfg);
    if (wtret == WT_NOTFOUND) {
        return 0;
    }
    if (wtret != 0) {
        return shl_wt_err(st, wtret, "query_timestamp");
    }
    *ts = strtoull(buf, NULL, 16);
    return 0;
}

typedef struct replayed_arg {
    uint64_t ts;
    shl_storage_txn_fn fn;
    void *arg;
} replayed_arg_t;

static int
replayed_fn(shl_storage_txn_t *txn, void *varg, shl_status_t *st)
{
    replayed_arg_t *r = varg;

    txn->fixed_ts = r->ts;
    return r->fn(txn, r->arg, st);
}

int
shl_storage_write_replayed(shl_storage_engine_t *eng, uint64_t ts, shl_storage_txn_fn fn, void *arg,
                           shl_status_t *st)
{
    replayed_arg_t r = {ts, fn, arg};

    return shl_storage_write_retry(eng, replayed_fn, &r, NULL, st);
}

static int
replay(shl_storage_engine_t *eng, uint64_t after, int64_t *applied, shl_status_t *st)
{
    shl_wt_session_t *s = NULL;
    WT_CURSOR *c = NULL;
    WT_ITEM v;
    int64_t key;
    int ret = 0, wtret, exact;

    *applied = 0;
    SHL_ERR(shl_wt_session_get(eng, &s, st));
    wtret = s->wt->open_cursor(s->wt, "table:oplog", NULL, NULL, &c);
    if (wtret != 0) {
        SHL_ERR(shl_wt_err(st, wtret, "open oplog"));
    }
    c->set_key(c, (int64_t)after + 1);
    wtret = c->search_near(c, &exact);
    if (wtret == 0 && exact < 0) {
        wtret = c->next(c);
    }
    while (wtret == 0) {
        bson_t entry, copy;
        if (c->get_key(c, &key) != 0 || c->get_value(c, &v) != 0 ||
            !bson_init_static(&entry, v.data, v.size)) {
            SHL_FAIL(st, SHL_CODE_INTERNAL_ERROR, "corrupt oplog entry");
        }
        /* The apply runs other transactions; keep our own copy of the entry. */
        bson_copy_to(&entry, &copy);
        ret = shl_oplog_apply(eng, &copy, st);
        if (ret == 0 && eng->opts.replay_derive != NULL) {
            ret = eng->opts.replay_derive(eng, &copy, eng->opts.replay_derive_arg, st);
        }
        bson_destroy(&copy);
        if (ret != 0) {
            SHL_LOG_ERROR(RECOVERY, 5100301, "failed to apply oplog entry during recovery", "ts",
                          BCON_TIMESTAMP(SHL_TS_SECS(key), SHL_TS_INC(key)), "error",
                          BCON_UTF8(st->reason));
            goto done;
        }
        (*applied)++;
        wtret = c->next(c);
    }
    if (wtret != WT_NOTFOUND) {
        SHL_ERR(shl_wt_err(st, wtret, "read oplog"));
    }
done:
    if (c != NULL) {
        c->close(c);
    }
    shl_wt_session_put(eng, s);
    return ret;
}

/* Drop collection-N / index-N tables that no catalog entry names. */
static int
drop_orphans(shl_storage_engine_t *eng, int64_t *dropped, shl_status_t *st)
{
    shl_wt_session_t *s = NULL;
    WT_CURSOR *meta = NULL;
    char **idents = NULL, **orphans = NULL;
    size_t norphans = 0;
    const char *key;
    int ret = 0, wtret;

    *dropped = 0;
    shl_catalog_idents(eng, &idents);
    SHL_ERR(shl_wt_session_get(eng, &s, st));
    wtret = s->wt->open_cursor(s->wt, "metadata:", NULL, NULL, &meta);
    if (wtret != 0) {
        SHL_ERR(shl_wt_err(st, wtret, "open metadata"));
    }
    while (meta->next(meta) == 0) {
        const char *name;
        bool named = false;
        if (meta->get_key(meta, &key) != 0 || strncmp(key, "table:", 6) != 0) {
            continue;
        }
        name = key + 6;
        if (strncmp(name, "collection-", 11) != 0 && strncmp(name, "index-", 6) != 0) {
            continue;
        }
        for (size_t i = 0; idents[i] != NULL && !named; i++) {
            named = strcmp(idents[i], name) == 0;
        }
        if (!named) {
            orphans = bson_realloc(orphans, (norphans + 1) * sizeof(*orphans));
            orphans[norphans++] = bson_strdup(key);
        }
    }
    meta->close(meta);
    meta = NULL;
    shl_wt_session_put(eng, s);
    s = NULL;
    for (size_t i = 0; i < norphans; i++) {
        SHL_LOG_INFO(RECOVERY, 22251, "Dropping unknown ident", "ident", BCON_UTF8(orphans[i]));
        if (shl_engine_drop_now(eng, orphans[i], st) != 0) {
            /* Retried after the next checkpoint. */
            shl_drop_ident_t d = {.uri = orphans[i], .drop_ts = 0};
            shl_engine_queue_drops(eng, &d, 1);
        } else {
            (*dropped)++;
        }
    }
done:
    if (meta != NULL) {
        meta->close(meta);
    }
    shl_wt_session_put(eng, s);
    for (size_t i = 0; i < norphans; i++) {
        bson_free(orphans[i]);
    }
    bson_free(orphans);
    bson_strfreev(idents);
    return ret;
}

int
shl_recovery_run(shl_storage_engine_t *eng, shl_status_t *st)
{
    uint64_t rec = 0;
    int64_t applied = 0, dropped = 0;
    char cfg[96];
    int ret = 0, wtret;

    SHL_ERR(query_ts(eng, "recovery", &rec, st));
    if (rec != 0) {
        /* WT does not restore these after a restart; replayed writes commit above. */
        snprintf(cfg, sizeof(cfg), "stable_timestamp=%" PRIx64 ",oldest_timestamp=%" PRIx64, rec,
                 rec);
        wtret = eng->conn->set_timestamp(eng->conn, cfg);
        if (wtret != 0) {
            SHL_ERR(shl_wt_err(st, wtret, "set_timestamp"));
        }
        atomic_store(&eng->stable_ts, rec);
        atomic_store(&eng->oldest_ts, rec);
        atomic_store(&eng->durable_ts, rec);
        /* Timestamps without an oplog entry (index build batches, aborted writes) can be
         * stable: the clock must start above the recovery timestamp too, not only above
         * the oplog's top, or new commits would fall below the oldest timestamp. */
        shl_storage_clock_advance(eng, rec);
    }
    if (eng->open_pin != 0) {
        /* A replica set member: what recovery replays above the stable checkpoint may never
         * have reached a majority (a former primary's own writes), so its stable timestamp
         * stays at the checkpoint's until repl knows the commit point on its branch. */
        shl_storage_pin_stable(eng, rec + 1);
        shl_storage_unpin_stable(eng, eng->open_pin);
        eng->open_pin = rec + 1;
    }
    SHL_ERR(replay(eng, rec, &applied, st));
    SHL_LOG_INFO(RECOVERY, 21544, "Recovering from the oplog", "recoveryTimestamp",
                 BCON_TIMESTAMP(SHL_TS_SECS(rec), SHL_TS_INC(rec)), "entriesApplied",
                 BCON_INT64(applied));
    SHL_ERR(drop_orphans(eng, &dropped, st));
    /* Nothing replayed needs replaying again: checkpoint at the new stable point. */
    SHL_ERR(shl_storage_checkpoint(eng, st));
done:
    return ret;
}
