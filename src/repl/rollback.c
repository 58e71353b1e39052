/*
 * rollback.c -- a member whose oplog holds entries its sync source never had (a primary killed
 * before they replicated) finds the newest entry both oplogs share (the common point), saves its
 * own versions of the documents the later entries touched under <dbpath>/rollback/ as MongoDB
 * does, puts the source's versions in their place (refetch), checkpoints, and removes the
 * entries from its oplog; fetching resumes at the common point. docs/design/replication.md
 * "Rollback".
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "base/clock.h"
#include "base/log.h"
#include "bson/bson_iter.h"
#include "bson/bson_util.h"
#include "db/repl_hooks.h"
#include "repl/repl_private.h"
#include "storage/catalog.h"
#include "storage/index.h"
#include "storage/oplog.h"
#include "storage/record_store.h"

/* Entries of our oplog compared with the source's per round trip. */
#define CHUNK 256
/* How far back (entries) a common point is looked for before giving up (a resync is needed). */
#define MAX_SCANNED 100000

typedef struct optime {
    uint64_t ts;
    int64_t t;
} optime_t;

/* One document a rolled-back entry touched. */
typedef struct rb_doc {
    char ns[256];
    uint8_t uuid[16];
    bool has_uuid;
    bson_t *id; /* {_id: <value>} */
} rb_doc_t;

typedef struct rb_set {
    rb_doc_t *docs;
    size_t n, cap;
    int64_t commands; /* DDL entries that cannot be undone here (logged) */
} rb_set_t;

static bool
is_local_entry(const bson_t *e)
{
    bson_iter_t it;

    return bson_iter_init_find(&it, e, "ns") && BSON_ITER_HOLDS_UTF8(&it) &&
           strncmp(bson_iter_utf8(&it, NULL), "local.", 6) == 0;
}

typedef struct optimes {
    optime_t *v;
    size_t n, cap;
} optimes_t;

static void
collect_optime(const bson_t *doc, void *arg)
{
    optimes_t *o = arg;

    if (o->n == o->cap) {
        o->cap = o->cap ? o->cap * 2 : 256;
        o->v = bson_realloc(o->v, o->cap * sizeof(*o->v));
    }
    o->v[o->n].ts = repl_optime_ts(doc, "ts");
    o->v[o->n].t = repl_entry_term(doc);
    o->n++;
}

/* The source's entries with lo <= ts <= hi (ts and t only). */
static int
source_optimes(repl_coord_t *rc, const char *host, uint64_t lo, uint64_t hi, optimes_t *out,
               shl_status_t *st)
{
    bson_t cmd = BSON_INITIALIZER, filter, range, proj, ns;
    int ret;

    BSON_APPEND_UTF8(&cmd, "find", "oplog.rs");
    BSON_APPEND_DOCUMENT_BEGIN(&cmd, "filter", &filter);
    BSON_APPEND_DOCUMENT_BEGIN(&filter, "ts", &range);
    BSON_APPEND_TIMESTAMP(&range, "$gte", SHL_TS_SECS(lo), SHL_TS_INC(lo));
    BSON_APPEND_TIMESTAMP(&range, "$lte", SHL_TS_SECS(hi), SHL_TS_INC(hi));
    bson_append_document_end(&filter, &range);
    /* The source's own local.* entries are not the set's (ours are left out as well): one
     * in the slot of one of our entries, of our term, would pass for a common entry (its
     * local writes logged again above a batch take the slots a primary uses next). */
    BSON_APPEND_DOCUMENT_BEGIN(&filter, "ns", &ns);
    BSON_APPEND_REGEX(&ns, "$not", "^local\\.", "");
    bson_append_document_end(&filter, &ns);
    bson_append_document_end(&cmd, &filter);
    BSON_APPEND_DOCUMENT_BEGIN(&cmd, "projection", &proj);
    BSON_APPEND_INT32(&proj, "ts", 1);
    BSON_APPEND_INT32(&proj, "t", 1);
    BSON_APPEND_INT32(&proj, "_id", 0);
    bson_append_document_end(&cmd, &proj);
    BSON_APPEND_INT32(&cmd, "batchSize", 10000);
    ret = repl_source_find(rc, host, "local", &cmd, collect_optime, out, st);
    bson_destroy(&cmd);
    return ret;
}

/* Up to CHUNK of our replicated entries with ts < 'below' (0: from the top), newest first. */
static int
our_chunk(repl_coord_t *rc, uint64_t below, optimes_t *out, shl_status_t *st)
{
    shl_storage_txn_t *txn = NULL;
    shl_record_cursor_t *cur = NULL;
    shl_collection_t *oplog = shl_oplog_collection(rc->eng);
    int ret = 0;

    out->n = 0;
    SHL_ERR(shl_storage_txn_begin(rc->eng, NULL, &txn, st));
    SHL_ERR(shl_record_cursor_open(txn, oplog, false, &cur, st));
    if (below != 0) {
        shl_record_cursor_seek(cur, (int64_t)below - 1);
    }
    while (out->n < CHUNK) {
        int64_t rid = 0;
        bson_t doc;
        bool eof = true;
        SHL_ERR(shl_record_cursor_next(cur, &rid, &doc, &eof, st));
        if (eof) {
            break;
        }
        if (!is_local_entry(&doc)) {
            collect_optime(&doc, out);
        }
    }
done:
    shl_record_cursor_close(cur);
    shl_storage_txn_abort(txn);
    shl_collection_release(oplog);
    return ret;
}

static bool
has_optime(const optimes_t *o, const optime_t *want)
{
    for (size_t i = 0; i < o->n; i++) {
        if (o->v[i].ts == want->ts && o->v[i].t == want->t) {
            return true;
        }
    }
    return false;
}

/* The newest entry our oplog and the source's share (same ts and term). */
static int
find_common_point(repl_coord_t *rc, const char *host, uint64_t *common, shl_status_t *st)
{
    optimes_t ours = {0}, theirs = {0};
    uint64_t below = 0;
    size_t scanned = 0;
    int ret = 0;

    *common = 0;
    while (*common == 0) {
        SHL_ERR(our_chunk(rc, below, &ours, st));
        if (ours.n == 0 || scanned > MAX_SCANNED) {
            SHL_FAIL(st, SHL_CODE_OPLOG_START_MISSING,
                     "no common point with the sync source's oplog within %zu entries", scanned);
        }
        theirs.n = 0;
        SHL_ERR(source_optimes(rc, host, ours.v[ours.n - 1].ts, ours.v[0].ts, &theirs, st));
        for (size_t i = 0; i < ours.n && *common == 0; i++) {
            if (has_optime(&theirs, &ours.v[i])) {
                *common = ours.v[i].ts;
            }
        }
        scanned += ours.n;
        below = ours.v[ours.n - 1].ts;
    }
done:
    bson_free(ours.v);
    bson_free(theirs.v);
    return ret;
}

/* ---------------------------------------------------------------- documents to refetch */

static void
add_doc(rb_set_t *set, const char *ns, const bson_iter_t *ui, const bson_t *holder, const char *key)
{
    bson_iter_t it;
    bson_t *id;
    rb_doc_t *d;

    if (!bson_iter_init_find(&it, holder, key) || !BSON_ITER_HOLDS_DOCUMENT(&it) ||
        !bson_iter_recurse(&it, &it) || !bson_iter_find(&it, "_id")) {
        return;
    }
    id = bson_new();
    bson_append_value(id, "_id", 3, bson_iter_value(&it));
    for (size_t i = 0; i < set->n; i++) {
        if (strcmp(set->docs[i].ns, ns) == 0 && set->docs[i].id->len == id->len &&
            memcmp(bson_get_data(set->docs[i].id), bson_get_data(id), id->len) == 0) {
            bson_destroy(id);
            return;
        }
    }
    if (set->n == set->cap) {
        set->cap = set->cap ? set->cap * 2 : 32;
        set->docs = bson_realloc(set->docs, set->cap * sizeof(*set->docs));
    }
    d = &set->docs[set->n++];
    memset(d, 0, sizeof(*d));
    snprintf(d->ns, sizeof(d->ns), "%s", ns);
    d->has_uuid = ui != NULL && shl_bson_iter_uuid(ui, d->uuid);
    d->id = id;
}

/* The document an 'i' / 'u' / 'd' op touched (its _id), into 'set'; commands are counted. */
static void
note_op(rb_set_t *set, const bson_t *op)
{
    bson_iter_t it, ui, sub;
    const char *ns = "", *kind = "";
    bool has_ui;

    if (bson_iter_init_find(&it, op, "op") && BSON_ITER_HOLDS_UTF8(&it)) {
        kind = bson_iter_utf8(&it, NULL);
    }
    if (bson_iter_init_find(&it, op, "ns") && BSON_ITER_HOLDS_UTF8(&it)) {
        ns = bson_iter_utf8(&it, NULL);
    }
    has_ui = bson_iter_init_find(&ui, op, "ui");
    if (strcmp(kind, "i") == 0 || strcmp(kind, "d") == 0) {
        add_doc(set, ns, has_ui ? &ui : NULL, op, "o");
    } else if (strcmp(kind, "u") == 0) {
        add_doc(set, ns, has_ui ? &ui : NULL, op, "o2");
    } else if (strcmp(kind, "c") == 0) {
        /* A transaction's applyOps: its inner ops; any other command is not undone. */
        if (bson_iter_init_find(&it, op, "o") && BSON_ITER_HOLDS_DOCUMENT(&it) &&
            bson_iter_recurse(&it, &sub) && bson_iter_find(&sub, "applyOps") &&
            BSON_ITER_HOLDS_ARRAY(&sub) && bson_iter_recurse(&sub, &sub)) {
            while (bson_iter_next(&sub)) {
                const uint8_t *data;
                uint32_t len;
                bson_t inner;
                if (BSON_ITER_HOLDS_DOCUMENT(&sub)) {
                    bson_iter_document(&sub, &len, &data);
                    if (bson_init_static(&inner, data, len)) {
                        note_op(set, &inner);
                    }
                }
            }
        } else {
            char *json = bson_as_relaxed_extended_json(op, NULL);
            SHL_LOG_WARNING(REPL, 2180031, "rollback cannot undo a command entry", "entry",
                            BCON_UTF8(json));
            bson_free(json);
            set->commands++;
        }
    }
}

/* Every document our entries after 'common' touched. */
static int
collect_docs(repl_coord_t *rc, uint64_t common, rb_set_t *set, uint64_t *top, shl_status_t *st)
{
    shl_storage_txn_t *txn = NULL;
    shl_record_cursor_t *cur = NULL;
    int ret = 0;

    *top = common;
    SHL_ERR(shl_storage_txn_begin(rc->eng, NULL, &txn, st));
    SHL_ERR(shl_oplog_cursor_open(txn, common, &cur, st));
    for (;;) {
        int64_t rid = 0;
        bson_t doc;
        bool eof = true;
        SHL_ERR(shl_record_cursor_next(cur, &rid, &doc, &eof, st));
        if (eof) {
            break;
        }
        if (!is_local_entry(&doc)) {
            note_op(set, &doc);
            *top = (uint64_t)rid;
        }
    }
done:
    shl_record_cursor_close(cur);
    shl_storage_txn_abort(txn);
    return ret;
}

/* ---------------------------------------------------------------- refetch */

static void
uuid_string(const uint8_t u[16], char out[37])
{
    snprintf(out, 37, "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0],
             u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13],
             u[14], u[15]);
}

/* Append our version of a rolled-back document to
 * <dbpath>/rollback/<collection uuid>/removed.<time>.bson (MongoDB's layout). */
static void
save_rollback_doc(repl_coord_t *rc, const shl_collection_t *coll, const char *stamp,
                  const bson_t *doc)
{
    char dir[1024], path[1024 + 128], uuid[37];
    FILE *fp;

    uuid_string(coll->uuid, uuid);
    snprintf(dir, sizeof(dir), "%s/rollback", shl_storage_dbpath(rc->eng));
    (void)mkdir(dir, 0755);
    snprintf(dir, sizeof(dir), "%s/rollback/%s", shl_storage_dbpath(rc->eng), uuid);
    (void)mkdir(dir, 0755);
    snprintf(path, sizeof(path), "%s/removed.%.63s.bson", dir, stamp);
    fp = fopen(path, "ab");
    if (fp == NULL || fwrite(bson_get_data(doc), 1, doc->len, fp) != doc->len) {
        SHL_LOG_WARNING(REPL, 2180032, "could not write a rollback file", "path", BCON_UTF8(path),
                        "error", BCON_UTF8(strerror(errno)));
    }
    if (fp != NULL) {
        fclose(fp);
    }
}

typedef struct one_doc {
    bson_t doc;
    bool found;
} one_doc_t;

static void
keep_doc(const bson_t *doc, void *arg)
{
    one_doc_t *o = arg;

    if (!o->found) {
        bson_destroy(&o->doc);
        bson_copy_to(doc, &o->doc);
        o->found = true;
    }
}

/* Our version of the document 'd' (saved to the rollback file) replaced by the source's, or
 * removed when the source has none, written at 'ts' without an oplog entry. */
static int
refetch_doc(repl_coord_t *rc, const char *host, const rb_doc_t *d, uint64_t ts, const char *stamp,
            shl_status_t *st)
{
    shl_collection_t *coll;
    shl_storage_txn_t *txn = NULL;
    bson_t mine = BSON_INITIALIZER, cmd = BSON_INITIALIZER, filter, entry = BSON_INITIALIZER;
    one_doc_t theirs = {BSON_INITIALIZER, false};
    bson_iter_t it;
    char db[128];
    const char *dot = strchr(d->ns, '.');
    bool found = false;
    int ret = 0;

    coll =
        d->has_uuid ? shl_catalog_get_by_uuid(rc->eng, d->uuid) : shl_catalog_get(rc->eng, d->ns);
    if (coll == NULL || dot == NULL) {
        goto done; /* the collection is gone here: nothing to put back */
    }
    bson_iter_init_find(&it, d->id, "_id");
    SHL_ERR(shl_storage_txn_begin(rc->eng, NULL, &txn, st));
    bson_destroy(&mine);
    SHL_ERR(shl_doc_find_by_id(txn, coll, bson_iter_value(&it), &mine, NULL, &found, st));
    shl_storage_txn_abort(txn);
    txn = NULL;
    if (found) {
        save_rollback_doc(rc, coll, stamp, &mine);
    }
    snprintf(db, sizeof(db), "%.*s", (int)(dot - d->ns), d->ns);
    BSON_APPEND_UTF8(&cmd, "find", dot + 1);
    BSON_APPEND_DOCUMENT_BEGIN(&cmd, "filter", &filter);
    bson_append_value(&filter, "_id", 3, bson_iter_value(&it));
    bson_append_document_end(&cmd, &filter);
    BSON_APPEND_INT32(&cmd, "limit", 1);
    BSON_APPEND_BOOL(&cmd, "singleBatch", true);
    SHL_ERR(repl_source_find(rc, host, db, &cmd, keep_doc, &theirs, st));
    bson_destroy(&entry);
    shl_oplog_entry_build(&entry, theirs.found ? 'i' : 'd', d->ns, coll->uuid,
                          theirs.found ? &theirs.doc : d->id, NULL, ts, rc->term,
                          shl_clock_wall_ms(), NULL);
    SHL_ERR(shl_oplog_apply(rc->eng, &entry, st));
done:
    if (txn != NULL) {
        shl_storage_txn_abort(txn);
    }
    if (coll != NULL) {
        shl_collection_release(coll);
    }
    bson_destroy(&mine);
    bson_destroy(&cmd);
    bson_destroy(&entry);
    bson_destroy(&theirs.doc);
    return ret;
}

int
repl_rollback_run(repl_coord_t *rc, const char *host, uint64_t *common, uint64_t *min_valid,
                  shl_status_t *st)
{
    rb_set_t set = {0};
    uint64_t top = 0, at;
    int64_t removed = 0;
    char stamp[64];
    time_t now = time(NULL);
    struct tm tm;
    bool held = false;
    int ret = 0;

    *common = 0;
    *min_valid = 0;
    repl_coord_set_state(rc, SHL_REPL_ROLLBACK);
    pthread_mutex_lock(&rc->mu);
    repl_coord_hold_stable_locked(rc);
    pthread_mutex_unlock(&rc->mu);
    SHL_ERR(find_common_point(rc, host, common, st));
    SHL_ERR(collect_docs(rc, *common, &set, &top, st));
    /* Prepared transactions leave storage first, as MongoDB aborts them before a rollback:
     * those after the common point for good (their writes hold documents the refetch
     * replaces, and no decision for them will come); those at or before it are prepared
     * again once the rollback is done (below). */
    (void)shl_db_repl_rollback_prepared(rc->svc, *common);
    held = true;
    SHL_LOG_INFO(REPL, 2180030, "rolling back to the common point", "source", BCON_UTF8(host),
                 "commonPoint", BCON_TIMESTAMP(SHL_TS_SECS(*common), SHL_TS_INC(*common)),
                 "rolledBackTo", BCON_TIMESTAMP(SHL_TS_SECS(top), SHL_TS_INC(top)), "documents",
                 BCON_INT64((int64_t)set.n), "commands", BCON_INT64(set.commands));
    /* The commit point never passes the common point (an election only makes a member with
     * every majority-committed entry primary); a member that says otherwise is corrupt. */
    SHL_ERR(repl_source_top(rc, host, min_valid, st));
    gmtime_r(&now, &tm);
    strftime(stamp, sizeof(stamp), "%Y-%m-%dT%H-%M-%S", &tm);
    /* The refetched versions go in just above our newest entry (and our stable and oldest
     * timestamps): WiredTiger 3.2 wants each document's versions in timestamp order, and the
     * versions being replaced are up to there (just above the common point, as it was tried
     * first, some rolled-back versions stayed visible). Our stable timestamp never passed the
     * commit point on our branch, so the stable checkpoint holds none of the writes rolled
     * back; it stays at the common point until we applied past the refetched versions
     * (repl_coord_rolled_back), so that no checkpoint holds a rolled-back version either. */
    at = top;
    if (shl_storage_stable_ts(rc->eng) > at) {
        at = shl_storage_stable_ts(rc->eng);
    }
    if (shl_storage_oldest_ts(rc->eng) > at) {
        at = shl_storage_oldest_ts(rc->eng);
    }
    at++;
    for (size_t i = 0; i < set.n; i++) {
        SHL_ERR(refetch_doc(rc, host, &set.docs[i], at, stamp, st));
    }
    SHL_ERR(shl_oplog_truncate_after(rc->eng, *common, &removed, st));
    repl_coord_rolled_back(rc, *common, at);
    SHL_LOG_INFO(REPL, 2180033, "rollback done", "commonPoint",
                 BCON_TIMESTAMP(SHL_TS_SECS(*common), SHL_TS_INC(*common)), "entriesRemoved",
                 BCON_INT64(removed), "minValid",
                 BCON_TIMESTAMP(SHL_TS_SECS(*min_valid), SHL_TS_INC(*min_valid)));
done:
    if (held) {
        (void)shl_db_repl_rollback_prepared_done(rc->svc);
    }
    if (ret != 0) {
        repl_coord_set_state(rc, SHL_REPL_SECONDARY);
    }
    for (size_t i = 0; i < set.n; i++) {
        bson_destroy(set.docs[i].id);
    }
    bson_free(set.docs);
    return ret;
}
