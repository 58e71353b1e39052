/*
 * migration_session.c -- the retryable-write history of a migrated range (MongoDB's
 * SessionCatalogMigrationSource and Destination; seeds/000 "Supporting retryability across
 * chunk migration"). The donor sends, through _getNextSessionMods, the oplog entries with
 * lsid/txnNumber/stmtId of writes to documents of the range: first each session's history
 * as config.transactions and the prevOpTime chains describe it when the source starts (a
 * chain the oplog no longer holds whole becomes a dead-end sentinel), then the entries
 * written since, read from the oplog. A findAndModify's image goes just before its entry as
 * a no-op carrying the document, the entry pointing at it with preImageOpTime /
 * postImageOpTime (MongoDB's "downconverted" form). The recipient hands each entry to its
 * session catalog (db_session_migrate_in), so a retry routed to it after the commit is
 * answered from that history.
 */
#include <string.h>

#include "base/clock.h"
#include "base/log.h"
#include "bson/bson_iter.h"
#include "bson/bson_util.h"
#include "db/node.h"
#include "db/session_catalog.h"
#include "shard/migration_private.h"
#include "storage/catalog.h"
#include "storage/index.h"
#include "storage/oplog.h"
#include "storage/record_store.h"

/* Oplog entries one scan for new writes reads at most (the rest on the next call). */
#define SCAN_ENTRIES 10000

struct mig_session_source {
    char ns[SHL_NS_MAX + 1];
    const shl_shard_key_pattern_t *pattern; /* borrowed; NULL: every document of ns */
    const bson_t *min, *max;                /* borrowed */
    bool follow;                            /* after the history, the writes made since */
    bool started;
    uint64_t scanned_ts; /* entries up to here were looked at */
    uint64_t answers_ts; /* retryable internal transactions committed up to here were sent */
    bson_t **queue;      /* entries to send, owned */
    size_t n, cap, pos;
};

mig_session_source_t *
mig_session_source_new(const char *ns, const shl_shard_key_pattern_t *pattern, const bson_t *min,
                       const bson_t *max, bool follow)
{
    mig_session_source_t *src = bson_malloc0(sizeof(*src));

    snprintf(src->ns, sizeof(src->ns), "%s", ns);
    src->follow = follow;
    src->pattern = pattern;
    src->min = min;
    src->max = max;
    return src;
}

void
mig_session_source_destroy(mig_session_source_t *src)
{
    if (src == NULL) {
        return;
    }
    for (size_t i = src->pos; i < src->n; i++) {
        bson_destroy(src->queue[i]);
    }
    bson_free(src->queue);
    bson_free(src);
}

static void
queue_push(mig_session_source_t *src, bson_t *doc)
{
    if (src->n == src->cap) {
        src->cap = src->cap != 0 ? src->cap * 2 : 64;
        src->queue = bson_realloc(src->queue, src->cap * sizeof(*src->queue));
    }
    src->queue[src->n++] = doc;
}

/*
 * The write an oplog entry records: the entry itself, or, for a no-op a migration wrote,
 * the donor's original entry it carries (o2). False for entries of no session.
 */
static bool
session_write_of(const bson_t *entry, bson_t *out)
{
    bson_t o;
    bson_iter_t it;

    if (bson_iter_init_find(&it, entry, "op") && BSON_ITER_HOLDS_UTF8(&it) &&
        strcmp(bson_iter_utf8(&it, NULL), "n") == 0 && shl_bson_get_subdoc(entry, "o", &o) &&
        bson_has_field(&o, "$sessionMigrateInfo") && shl_bson_get_subdoc(entry, "o2", out)) {
        return bson_has_field(out, "lsid");
    }
    bson_init_static(out, bson_get_data(entry), entry->len);
    return bson_has_field(entry, "lsid") && bson_has_field(entry, "txnNumber");
}

/*
 * Whether the write 'w' touched a document of the source's range. A delete's entry holds
 * only the _id (a $v:2 update's a diff): it is sent (a history entry the recipient does not need is harmless; one
 * it lacks makes a retry run twice).
 */
static bool
write_in_range(const mig_session_source_t *src, const bson_t *w)
{
    bson_iter_t it;
    bson_t o;

    if (!bson_iter_init_find(&it, w, "ns") || !BSON_ITER_HOLDS_UTF8(&it) ||
        strcmp(bson_iter_utf8(&it, NULL), src->ns) != 0) {
        return false;
    }
    if (src->pattern == NULL || !shl_bson_get_subdoc(w, "o", &o) ||
        (bson_iter_init_find(&it, w, "op") && BSON_ITER_HOLDS_UTF8(&it) &&
         strcmp(bson_iter_utf8(&it, NULL), "d") == 0) ||
        bson_has_field(&o, "$v")) {
        /* A $v:2 update's o is a diff, not the document: sent too. */
        return true;
    }
    return mig_doc_in_range(src->pattern, &o, src->min, src->max);
}

/* The image config.image_collection holds for lsid 'key' at entry 'ts', copied, or NULL. */
static bson_t *
find_image(shl_storage_txn_t *txn, shl_collection_t *ic, const bson_value_t *key, uint64_t ts,
           shl_status_t *st)
{
    bson_t doc, image;
    bson_iter_t it;
    bson_t *out = NULL;
    bool found = false;

    if (ic != NULL && shl_doc_find_by_id(txn, ic, key, &doc, NULL, &found, st) == 0 && found &&
        bson_iter_init_find(&it, &doc, "ts") && BSON_ITER_HOLDS_TIMESTAMP(&it) &&
        shl_bson_iter_timestamp_u64(&it) == ts && shl_bson_get_subdoc(&doc, "image", &image)) {
        out = bson_copy(&image);
    }
    if (ic != NULL) {
        bson_destroy(&doc);
    }
    return out;
}

/*
 * Queue the write 'w' (recorded at 'ts'): a findAndModify that needs its image is
 * downconverted, the image going first as a no-op the entry points at.
 */
static void
queue_write(mig_session_source_t *src, shl_storage_txn_t *txn, shl_collection_t *ic,
            const bson_t *w, uint64_t ts)
{
    bson_iter_t it, lsid;
    const char *kind = NULL;
    bson_t *image = NULL, *entry;
    shl_status_t st = SHL_STATUS_INIT;

    if (bson_iter_init_find(&it, w, "needsRetryImage") && BSON_ITER_HOLDS_UTF8(&it)) {
        kind = bson_iter_utf8(&it, NULL);
        if (bson_iter_init_find(&lsid, w, "lsid")) {
            image = find_image(txn, ic, bson_iter_value(&lsid), ts, &st);
        }
    }
    if (image == NULL) {
        queue_push(src, bson_copy(w));
        return;
    }
    {
        bson_t *noop = bson_new();
        bson_t opt;
        BSON_APPEND_UTF8(noop, "op", "n");
        BSON_APPEND_UTF8(noop, "ns", src->ns);
        BSON_APPEND_DOCUMENT(noop, "o", image);
        shl_bson_append_timestamp_u64(noop, "ts", ts);
        BSON_APPEND_VALUE(noop, "lsid", bson_iter_value(&lsid));
        if (bson_iter_init_find(&it, w, "txnNumber")) {
            BSON_APPEND_VALUE(noop, "txnNumber", bson_iter_value(&it));
        }
        if (bson_iter_init_find(&it, w, "stmtId")) {
            BSON_APPEND_VALUE(noop, "stmtId", bson_iter_value(&it));
        }
        queue_push(src, noop);
        entry = bson_new();
        bson_iter_init(&it, w);
        while (shl_iter_next(&it)) {
            if (strcmp(shl_iter_key(&it), "needsRetryImage") != 0) {
                bson_append_iter(entry, NULL, 0, &it);
            }
        }
        BSON_APPEND_DOCUMENT_BEGIN(
            entry, strcmp(kind, "postImage") == 0 ? "postImageOpTime" : "preImageOpTime", &opt);
        shl_bson_append_timestamp_u64(&opt, "ts", ts);
        BSON_APPEND_INT64(&opt, "t", shl_bson_int64_at(w, "t"));
        bson_append_document_end(entry, &opt);
        queue_push(src, entry);
    }
    bson_destroy(image);
}

/* MongoDB's dead-end sentinel: {op: 'n', ns, o: {}, o2: {$incompleteOplogHistory: 1}, lsid,
 * txnNumber, stmtId: -2}, for a session whose history the donor cannot send whole. */
static bson_t *
dead_end(const mig_session_source_t *src, const bson_value_t *lsid, int64_t txn_number)
{
    bson_t *e = bson_new();
    bson_t o;

    BSON_APPEND_UTF8(e, "op", "n");
    BSON_APPEND_UTF8(e, "ns", src->ns);
    BSON_APPEND_DOCUMENT_BEGIN(e, "o", &o);
    bson_append_document_end(e, &o);
    BSON_APPEND_DOCUMENT_BEGIN(e, "o2", &o);
    BSON_APPEND_INT32(&o, "$incompleteOplogHistory", 1);
    bson_append_document_end(e, &o);
    BSON_APPEND_VALUE(e, "lsid", lsid);
    BSON_APPEND_INT64(e, "txnNumber", txn_number);
    BSON_APPEND_INT32(e, "stmtId", DB_INCOMPLETE_HISTORY_STMT_ID);
    BSON_APPEND_DATE_TIME(e, "wall", shl_clock_wall_ms());
    return e;
}

/* The {ts, t} at 'key' of 'doc' as a timestamp (0 when absent). */
static uint64_t
optime_ts(const bson_t *doc, const char *key)
{
    bson_iter_t it, f;

    if (bson_iter_init_find(&it, doc, key) && BSON_ITER_HOLDS_DOCUMENT(&it) &&
        bson_iter_recurse(&it, &f) && bson_iter_find(&f, "ts") && BSON_ITER_HOLDS_TIMESTAMP(&f)) {
        return shl_bson_iter_timestamp_u64(&f);
    }
    return 0;
}

/*
 * One session's history (its config.transactions document 'rec'): the writes of its
 * current txnNumber in the range, oldest first, up to 'upto' (newer ones come from the
 * oplog scan); a dead end when the chain breaks before its start.
 */
static int
queue_session(mig_session_source_t *src, shl_storage_txn_t *txn, shl_collection_t *oplog,
              shl_collection_t *ic, const bson_t *rec, uint64_t upto, shl_status_t *st)
{
    int ret = 0;
    bson_iter_t lsid;
    int64_t txn_number = shl_bson_int64_at(rec, "txnNum");
    bson_t **chain = NULL, entry = BSON_INITIALIZER;
    uint64_t *chain_ts = NULL;
    size_t n = 0, cap = 0;
    bool broken = false;

    if (!bson_iter_init_find(&lsid, rec, "_id")) {
        goto done;
    }
    for (uint64_t ts = optime_ts(rec, "lastWriteOpTime"); ts != 0;) {
        bool found = false;
        bson_t w;
        bson_destroy(&entry);
        SHL_ERR(shl_record_get(txn, oplog, (int64_t)ts, &entry, &found, st));
        if (!found) {
            broken = true;
            break;
        }
        if (shl_bson_int64_at(&entry, "txnNumber") != txn_number) {
            break;
        }
        if (ts <= upto && session_write_of(&entry, &w) && write_in_range(src, &w)) {
            if (n == cap) {
                cap = cap != 0 ? cap * 2 : 16;
                chain = bson_realloc(chain, cap * sizeof(*chain));
                chain_ts = bson_realloc(chain_ts, cap * sizeof(*chain_ts));
            }
            chain[n] = bson_copy(&w);
            chain_ts[n] = ts;
            n++;
        }
        ts = optime_ts(&entry, "prevOpTime");
    }
    if (broken) {
        queue_push(src, dead_end(src, bson_iter_value(&lsid), txn_number));
    }
    while (n > 0) {
        n--;
        queue_write(src, txn, ic, chain[n], chain_ts[n]);
        bson_destroy(chain[n]);
    }
done:
    for (size_t i = 0; i < n; i++) {
        bson_destroy(chain[i]);
    }
    bson_free(chain);
    bson_free(chain_ts);
    bson_destroy(&entry);
    return ret;
}

/*
 * The first call: every session's history as of now (the no-holes point, so no write at or
 * before it is still in flight). Later calls scan the oplog from there.
 */
static int
load_history(mig_session_source_t *src, shl_storage_engine_t *eng, shl_status_t *st)
{
    int ret = 0;
    uint64_t upto = shl_storage_all_durable(eng);
    shl_storage_txn_t *txn = NULL;
    shl_collection_t *tc = shl_catalog_get(eng, DB_TRANSACTIONS_NS);
    shl_collection_t *ic = shl_catalog_get(eng, DB_IMAGE_COLLECTION_NS);
    shl_collection_t *oplog = shl_oplog_collection(eng);
    shl_record_cursor_t *c = NULL;
    bson_t **recs = NULL;
    size_t n = 0, cap = 0;

    SHL_ERR(shl_storage_txn_begin(eng, NULL, &txn, st));
    if (tc != NULL) {
        SHL_ERR(shl_record_cursor_open(txn, tc, true, &c, st));
        for (;;) {
            int64_t rid;
            bson_t doc;
            bool eof;
            SHL_ERR(shl_record_cursor_next(c, &rid, &doc, &eof, st));
            if (eof) {
                break;
            }
            if (n == cap) {
                cap = cap != 0 ? cap * 2 : 64;
                recs = bson_realloc(recs, cap * sizeof(*recs));
            }
            recs[n++] = bson_copy(&doc);
        }
        shl_record_cursor_close(c);
        c = NULL;
    }
    for (size_t i = 0; i < n; i++) {
        SHL_ERR(queue_session(src, txn, oplog, ic, recs[i], upto, st));
    }
    src->scanned_ts = upto;
    src->started = true;
done:
    shl_record_cursor_close(c);
    if (txn != NULL) {
        shl_storage_txn_abort(txn);
    }
    for (size_t i = 0; i < n; i++) {
        bson_destroy(recs[i]);
    }
    bson_free(recs);
    shl_collection_release(tc);
    shl_collection_release(ic);
    shl_collection_release(oplog);
    return ret;
}

/* The session writes in the range committed since the last look (up to the no-holes point). */
static int
scan_new(mig_session_source_t *src, shl_storage_engine_t *eng, shl_status_t *st)
{
    int ret = 0;
    shl_storage_txn_t *txn = NULL;
    shl_record_cursor_t *c = NULL;
    shl_collection_t *ic = shl_catalog_get(eng, DB_IMAGE_COLLECTION_NS);
    int entries = 0;

    SHL_ERR(shl_storage_txn_begin(eng, NULL, &txn, st));
    SHL_ERR(shl_oplog_cursor_open(txn, src->scanned_ts, &c, st));
    while (entries < SCAN_ENTRIES) {
        int64_t rid;
        bson_t doc, w;
        bool eof;
        SHL_ERR(shl_record_cursor_next(c, &rid, &doc, &eof, st));
        if (eof) {
            break;
        }
        entries++;
        src->scanned_ts = (uint64_t)rid;
        if (session_write_of(&doc, &w) && write_in_range(src, &w)) {
            queue_write(src, txn, ic, &w, (uint64_t)rid);
        }
    }
done:
    shl_record_cursor_close(c);
    if (txn != NULL) {
        shl_storage_txn_abort(txn);
    }
    shl_collection_release(ic);
    return ret;
}

/* What queue_answer needs. */
typedef struct answers_arg {
    mig_session_source_t *src;
    uint64_t from, upto;
} answers_arg_t;

/*
 * A statement a retryable internal transaction ran for a parent session's retryable write
 * (session_catalog.h "child sessions"), downconverted (seeds/000 "Supporting retryability
 * across chunk migration"): the write as a retryable write of the parent session would
 * have logged it, so the recipient takes it into the parent's history; a findAndModify's
 * returned document goes first as its image.
 */
static void
queue_answer(void *arg, const shl_lsid_t *parent, int64_t txn_number, int32_t stmt_id, uint64_t ts,
             const bson_t *answer)
{
    answers_arg_t *a = arg;
    mig_session_source_t *src = a->src;
    bson_t rdoc, le, value, id_doc = BSON_INITIALIZER, opt;
    bson_iter_t it;
    const char *k = "", *op = NULL, *image_kind = NULL;
    bson_t *entry;

    if (ts <= a->from || ts > a->upto || !bson_iter_init_find(&it, answer, "ns") ||
        !BSON_ITER_HOLDS_UTF8(&it) || strcmp(bson_iter_utf8(&it, NULL), src->ns) != 0 ||
        !shl_bson_get_subdoc(answer, "rdoc", &rdoc) ||
        (src->pattern != NULL && !mig_doc_in_range(src->pattern, &rdoc, src->min, src->max))) {
        goto done;
    }
    if (bson_iter_init_find(&it, answer, "k") && BSON_ITER_HOLDS_UTF8(&it)) {
        k = bson_iter_utf8(&it, NULL);
    }
    if (strcmp(k, "f") == 0 && shl_bson_get_subdoc(answer, "lastErrorObject", &le)) {
        bool has_value = shl_bson_get_subdoc(answer, "value", &value);
        if (bson_has_field(&le, "upserted")) {
            op = "i";
        } else if (bson_has_field(&le, "updatedExisting") && has_value) {
            op = "u";
            image_kind = bson_iter_init_find(&it, answer, "new") && bson_iter_as_bool(&it)
                             ? "postImageOpTime"
                             : (bson_has_field(answer, "new") ? "preImageOpTime"
                                                              : "postImageOpTime");
        } else if (has_value) {
            op = "d";
            image_kind = "preImageOpTime";
        }
    } else if (strcmp(k, "u") == 0 || strcmp(k, "i") == 0 || strcmp(k, "d") == 0) {
        op = k;
    }
    if (op == NULL) {
        goto done;
    }
    if (bson_iter_init_find(&it, &rdoc, "_id")) {
        bson_append_iter(&id_doc, "_id", 3, &it);
    }
    if (image_kind != NULL) {
        bson_t *noop = bson_new();
        BSON_APPEND_UTF8(noop, "op", "n");
        BSON_APPEND_UTF8(noop, "ns", src->ns);
        BSON_APPEND_DOCUMENT(noop, "o", &value);
        shl_bson_append_timestamp_u64(noop, "ts", ts);
        shl_lsid_append(noop, "lsid", parent);
        BSON_APPEND_INT64(noop, "txnNumber", txn_number);
        BSON_APPEND_INT32(noop, "stmtId", stmt_id);
        queue_push(src, noop);
    }
    entry = bson_new();
    BSON_APPEND_UTF8(entry, "op", op);
    BSON_APPEND_UTF8(entry, "ns", src->ns);
    BSON_APPEND_DOCUMENT(entry, "o", strcmp(op, "d") == 0 ? &id_doc : &rdoc);
    if (strcmp(op, "u") == 0) {
        BSON_APPEND_DOCUMENT(entry, "o2", &id_doc);
    }
    shl_bson_append_timestamp_u64(entry, "ts", ts);
    BSON_APPEND_INT64(entry, "t", 1);
    shl_lsid_append(entry, "lsid", parent);
    BSON_APPEND_INT64(entry, "txnNumber", txn_number);
    BSON_APPEND_INT32(entry, "stmtId", stmt_id);
    BSON_APPEND_DATE_TIME(entry, "wall", shl_clock_wall_ms());
    if (image_kind != NULL) {
        BSON_APPEND_DOCUMENT_BEGIN(entry, image_kind, &opt);
        shl_bson_append_timestamp_u64(&opt, "ts", ts);
        BSON_APPEND_INT64(&opt, "t", 1);
        bson_append_document_end(entry, &opt);
    }
    queue_push(src, entry);
done:
    bson_destroy(&id_doc);
}

/* The retryable internal transactions of the range committed since the last look. */
static void
queue_answers(shard_state_t *s, mig_session_source_t *src)
{
    struct db_session_catalog *cat = shl_node_session_catalog(s->svc);
    answers_arg_t a = {src, src->answers_ts, src->scanned_ts};

    if (cat != NULL && a.upto > a.from) {
        db_session_child_each(cat, queue_answer, &a);
    }
    src->answers_ts = src->scanned_ts;
}

int
mig_session_source_next(shard_state_t *s, mig_session_source_t *src, bson_t *arr, shl_status_t *st)
{
    int ret = 0;
    shl_storage_engine_t *eng = s->svc->storage;
    uint32_t k = 0;
    char key[16];
    const char *kp;

    if (!src->started) {
        SHL_ERR(load_history(src, eng, st));
        queue_answers(s, src);
    }
    if (src->pos == src->n) {
        src->n = src->pos = 0; /* everything queued was sent (and freed) */
        if (src->follow) {
            SHL_ERR(scan_new(src, eng, st));
            queue_answers(s, src);
        }
    }
    while (src->pos < src->n &&
           shl_bson_array_has_room(arr, k, src->queue[src->pos]->len, MIG_BATCH_BYTES)) {
        bson_uint32_to_string(k++, &kp, key, sizeof(key));
        BSON_APPEND_DOCUMENT(arr, kp, src->queue[src->pos]);
        bson_destroy(src->queue[src->pos]);
        src->pos++;
    }
done:
    return ret;
}

/* ---------------------------------------------------------------- recipient */

int
mig_session_apply(shard_state_t *s, shl_op_ctx_t *op, const bson_t *reply, size_t *n,
                  shl_status_t *st)
{
    int ret = 0;
    struct db_session_catalog *cat = shl_node_session_catalog(s->svc);
    bson_t *entries = NULL;
    size_t count = mig_docs_of(reply, "oplog", &entries);
    db_migrated_write_t *w = bson_malloc0((count + 1) * sizeof(*w));
    bson_t *images = bson_malloc0((count + 1) * sizeof(*images)); /* views into 'entries' */
    size_t nw = 0;
    bson_t image_doc;
    bool have_image = false;
    uint64_t image_ts = 0;

    *n = count;
    for (size_t i = 0; i < count && cat != NULL; i++) {
        const bson_t *e = &entries[i];
        bson_iter_t it;
        bool has_image_ref =
            bson_has_field(e, "preImageOpTime") || bson_has_field(e, "postImageOpTime");
        if (bson_iter_init_find(&it, e, "op") && BSON_ITER_HOLDS_UTF8(&it) &&
            strcmp(bson_iter_utf8(&it, NULL), "n") == 0 && !bson_has_field(e, "o2")) {
            /* A no-op without o2 is a findAndModify's image, for the entry that follows and
             * points at it. */
            have_image = false;
            if (shl_bson_get_subdoc(e, "o", &image_doc) && bson_iter_init_find(&it, e, "ts") &&
                BSON_ITER_HOLDS_TIMESTAMP(&it)) {
                image_ts = shl_bson_iter_timestamp_u64(&it);
                have_image = true;
            }
            continue;
        }
        w[nw].entry = e;
        if (has_image_ref && have_image &&
            (optime_ts(e, "preImageOpTime") == image_ts ||
             optime_ts(e, "postImageOpTime") == image_ts)) {
            bson_init_static(&images[nw], bson_get_data(&image_doc), image_doc.len);
            w[nw].image = &images[nw];
        }
        nw++;
        have_image = false;
    }
    if (nw > 0) {
        ret = db_session_migrate_in(cat, op, w, nw, st);
    }
    bson_free(images);
    bson_free(w);
    SHL_ERR(ret);
done:
    bson_free(entries);
    return ret;
}
