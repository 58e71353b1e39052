/*
 * write.c -- document writes: record + index entries + oplog entry in one WT
 * transaction at one fresh timestamp (see write.h). In replay mode (txn->fixed_ts set
 * by recovery) the same code applies an oplog entry without appending a new one.
 */
#include "storage/storage_private.h"

#include <string.h>

#include "base/clock.h"
#include "storage/oplog.h"
#include "storage/index.h"
#include "storage/record_store.h"
#include "storage/write.h"
#include "bson/bson_util.h"
#include "bson/update_diff.h"

/* shl_storage_set_from_migrate: this thread's writes are a migration recipient's. */
static _Thread_local bool tls_from_migrate;

void
shl_storage_set_from_migrate(bool on)
{
    tls_from_migrate = on;
}

int
shl_write_oplog_entry(shl_storage_txn_t *txn, char op, const char *ns, const uint8_t *uuid,
                      const bson_t *o, const bson_t *o2, const bson_t *extra, uint64_t ts,
                      shl_status_t *st)
{
    WT_CURSOR *c = NULL;
    bson_t *entry = &txn->sess->entry; /* its buffer reused: no allocation per entry */
    WT_ITEM v;
    int ret = 0, wtret;

    if (txn->multi) {
        /* One entry for the whole transaction is written when it commits or prepares; its
         * ops keep none of the extra fields. */
        shl_txn_collect_op(txn, op, ns, uuid, o, o2);
        return 0;
    }
    if (tls_from_migrate && op != 'n') {
        bson_t marked = BSON_INITIALIZER;
        if (extra != NULL) {
            bson_concat(&marked, extra);
        }
        if (!shl_bson_has_key(&marked, "fromMigrate")) {
            BSON_APPEND_BOOL(&marked, "fromMigrate", true);
        }
        bson_reinit(entry);
        shl_oplog_entry_fill(entry, op, ns, uuid, o, o2, ts, shl_storage_term(txn->eng),
                             txn->wall_ms, &marked);
        bson_destroy(&marked);
    } else {
        bson_reinit(entry);
        shl_oplog_entry_fill(entry, op, ns, uuid, o, o2, ts, shl_storage_term(txn->eng),
                             txn->wall_ms, extra);
    }
    v.data = bson_get_data(entry);
    v.size = entry->len;
    SHL_ERR(shl_wt_cursor_get(txn->eng, txn->sess, "table:oplog", &c, st));
    c->set_key(c, (int64_t)ts);
    c->set_value(c, &v);
    wtret = c->insert(c);
    if (wtret == WT_DUPLICATE_KEY) {
        SHL_FAIL(st, SHL_CODE_INTERNAL_ERROR, "oplog slot %u,%u used twice", SHL_TS_SECS(ts),
                 SHL_TS_INC(ts));
    }
    if (wtret != 0) {
        SHL_ERR(shl_wt_err(st, wtret, "oplog insert"));
    }
    shl_txn_add_delta(txn, txn->eng->oplog->rs, 1, entry->len);
done:
    if (c != NULL) {
        shl_wt_cursor_put(txn->sess, "table:oplog", c);
    }
    if (entry->len > 65536) {
        bson_destroy(entry); /* a big entry's buffer is not kept for the next ones */
        bson_init(entry);
    }
    return ret;
}

/* {_id: <doc's _id>} into 'out' (initialised here); false if the doc has no _id. */
static bool
id_doc(const bson_t *doc, bson_t *out)
{
    bson_iter_t it;
    bson_init(out);
    if (!shl_bson_iter_find_key(&it, doc, "_id")) {
        return false;
    }
    bson_append_iter(out, "_id", 3, &it);
    return true;
}

static void
keysets_cleanup(shl_keyset_t *ks, size_t n)
{
    for (size_t i = 0; ks != NULL && i < n; i++) {
        shl_keyset_cleanup(&ks[i]);
    }
    bson_free(ks);
}

typedef struct side_note {
    const shl_collection_t *coll;
    const uint64_t *multi, *types;
} side_note_t;

static int
side_note_fn(shl_storage_txn_t *txn, void *arg, shl_status_t *st)
{
    side_note_t *n = arg;
    uint64_t ts;
    int ret = 0;

    SHL_ERR(shl_txn_next_ts(txn, &ts, st));
    SHL_ERR(shl_catalog_note_multikey(txn, n->coll, n->multi, n->types, st));
done:
    return ret;
}

/* Mark the indexes where 'doc' has an array on a key path (several keys, or one from a
 * one-element array: MongoDB's multikey) as multikey, and note numeric types new to an
 * index's fields (catalog, in 'txn'). */
static int
note_multikey(shl_storage_txn_t *txn, const shl_collection_t *coll, const shl_keyset_t *ks,
              shl_status_t *st)
{
    uint64_t *multi = bson_malloc0((coll->nindexes + 1) * sizeof(uint64_t));
    uint64_t *types = bson_malloc0((coll->nindexes + 1) * sizeof(uint64_t));
    bool any = false;
    int ret = 0;

    for (size_t i = 0; i < coll->nindexes; i++) {
        /* Several keys without a reported path (a custom generator): every field. */
        multi[i] = ks[i].array_paths != 0 ? ks[i].array_paths : ks[i].n > 1 ? ~(uint64_t)0 : 0;
        /* Against the durable entry: the in-memory flags may hold bits a write published
         * before it aborted, which no catalog entry has. */
        multi[i] &= ~coll->indexes[i]->durable_multikey_paths;
        types[i] = (coll->indexes[i]->durable_num_types & SHL_NUM_TYPES_UNKNOWN) != 0
                       ? 0
                       : ks[i].num_types & ~coll->indexes[i]->durable_num_types;
        any = any || multi[i] != 0 || types[i] != 0;
    }
    if (any && txn->multi && shl_txn_find_change(txn, coll->ns) == NULL) {
        /* A multi-document transaction notes it in a side unit of its own, as MongoDB does:
         * its snapshot may predate the catalog entry's last change (a collection created
         * since), and a flag set for a write that then aborts is harmless. */
        side_note_t n = {coll, multi, types};
        SHL_ERR(shl_storage_write_retry(txn->eng, side_note_fn, &n, NULL, st));
    } else if (any) {
        /* (A collection the transaction created itself is noted in it: its entry is
         * pending there.) */
        SHL_ERR(shl_catalog_note_multikey(txn, coll, multi, types, st));
    }
done:
    bson_free(multi);
    bson_free(types);
    return ret;
}

/* The keys of 'doc' for every index of 'coll' (an array of coll->nindexes sets). */
static int
keys_for_all(const shl_collection_t *coll, const bson_t *doc, shl_keyset_t **out, shl_status_t *st)
{
    shl_keyset_t *ks = bson_malloc0((coll->nindexes + 1) * sizeof(*ks));
    int ret = 0;

    for (size_t i = 0; i < coll->nindexes; i++) {
        shl_keyset_init(&ks[i]);
    }
    for (size_t i = 0; i < coll->nindexes; i++) {
        SHL_ERR(shl_index_keys_for_doc(coll->indexes[i], doc, &ks[i], st));
    }
    *out = ks;
    ks = NULL;
done:
    keysets_cleanup(ks, coll->nindexes);
    return ret;
}

/* a - b for sorted, de-duplicated key sets. */
static void
keyset_minus(const shl_keyset_t *a, const shl_keyset_t *b, shl_keyset_t *out)
{
    size_t i = 0, j = 0;
    shl_keyset_clear(out);
    while (i < a->n) {
        size_t la, lb = 0;
        const uint8_t *ka = shl_keyset_key(a, i, &la), *kb = NULL;
        int c = 1;
        if (j < b->n) {
            kb = shl_keyset_key(b, j, &lb);
            c = memcmp(ka, kb, la < lb ? la : lb);
            if (c == 0) {
                c = la < lb ? -1 : (la > lb ? 1 : 0);
            }
        } else {
            c = -1;
        }
        if (c < 0) {
            shl_keyset_add(out, ka, la);
            i++;
        } else if (c == 0) {
            i++;
            j++;
        } else {
            j++;
        }
    }
}

/*
 * Insert keys[i] into every index for 'rid'. On a duplicate, take back the keys
 * inserted into earlier indexes, fill the DuplicateKey status for 'doc'.
 */
static int
insert_all_keys(shl_storage_txn_t *txn, const shl_collection_t *coll, const shl_keyset_t *keys,
                int64_t rid, const bson_t *doc, shl_status_t *st)
{
    int ret = 0;
    size_t i;
    bool dup = false;

    for (i = 0; i < coll->nindexes; i++) {
        SHL_ERR(shl_index_insert_keys(txn, coll->indexes[i], &keys[i], rid, NULL, &dup, st));
        if (dup) {
            break;
        }
    }
    if (dup) {
        for (size_t j = 0; j < i; j++) {
            SHL_ERR(shl_index_remove_keys(txn, coll->indexes[j], &keys[j], rid, st));
        }
        SHL_ERR(shl_index_dup_key_status(coll->ns, coll->indexes[i], doc, st));
    }
done:
    return ret;
}

static int
check_target(const shl_collection_t *coll, shl_status_t *st)
{
    if (coll->is_oplog) {
        return shl_status_set(st, SHL_CODE_ILLEGAL_OPERATION, "cannot write to '%s'", coll->ns);
    }
    return 0;
}

static int64_t
pending_delta(const shl_storage_txn_t *txn, const shl_rs_state_t *rs, bool size)
{
    for (size_t i = 0; i < txn->ndeltas; i++) {
        if (txn->deltas[i].rs == rs) {
            return size ? txn->deltas[i].size : txn->deltas[i].count;
        }
    }
    return 0;
}

/* Capped collections: delete the oldest documents past size/max, newest kept. */
static int
capped_trim(shl_storage_txn_t *txn, const shl_collection_t *coll, int64_t new_rid, shl_status_t *st)
{
    shl_record_cursor_t *rc = NULL;
    int64_t count = shl_collection_num_records(coll) + pending_delta(txn, coll->rs, false);
    int64_t size = shl_collection_data_size(coll) + pending_delta(txn, coll->rs, true);
    int64_t victims[64];
    bson_t docs[64];
    int nv = 0;
    int ret = 0;

    SHL_ERR(shl_record_cursor_open(txn, coll, true, &rc, st));
    while ((coll->capped_max > 0 && count > coll->capped_max) ||
           (coll->capped_size > 0 && size > coll->capped_size)) {
        int64_t rid;
        bson_t doc;
        bool eof;
        SHL_ERR(shl_record_cursor_next(rc, &rid, &doc, &eof, st));
        if (eof || rid == new_rid || nv == 64) {
            break;
        }
        victims[nv] = rid;
        bson_copy_to(&doc, &docs[nv]);
        nv++;
        count--;
        size -= doc.len;
    }
    shl_record_cursor_close(rc);
    rc = NULL;
    for (int i = 0; i < nv; i++) {
        /* The trimming deletes are not part of the caller's (retryable) write. */
        SHL_ERR(shl_doc_delete(txn, coll, victims[i], &docs[i], NULL, st));
    }
done:
    shl_record_cursor_close(rc);
    for (int i = 0; i < nv; i++) {
        bson_destroy(&docs[i]);
    }
    return ret;
}

int
shl_doc_insert(shl_storage_txn_t *txn, const shl_collection_t *coll, const bson_t *doc,
               const shl_write_opts_t *wo, int64_t *rid_out, shl_status_t *st)
{
    shl_keyset_t *keys = NULL;
    bson_t o2;
    uint64_t ts;
    int64_t rid;
    int ret = 0;

    bson_init(&o2);
    SHL_ERR(check_target(coll, st));
    bson_destroy(&o2);
    if (!id_doc(doc, &o2)) {
        SHL_FAIL(st, SHL_CODE_BAD_VALUE, "document to insert has no _id");
    }
    /* Key generation can fail (parallel arrays): do it before writing anything. */
    SHL_ERR(keys_for_all(coll, doc, &keys, st));
    SHL_ERR(shl_txn_next_ts(txn, &ts, st));
    rid = atomic_fetch_add(&coll->rs->next_rid, 1);
    SHL_ERR(insert_all_keys(txn, coll, keys, rid, doc, st));
    SHL_ERR(note_multikey(txn, coll, keys, st));
    SHL_ERR(shl_record_insert_at(txn, coll, rid, doc, st));
    if (txn->fixed_ts == 0) {
        SHL_ERR(shl_write_oplog_entry(txn, 'i', coll->ns, coll->uuid, doc, &o2,
                                      wo != NULL ? wo->oplog_extra : NULL, ts, st));
        if (wo != NULL && wo->ts != NULL) {
            *wo->ts = ts;
        }
        if (coll->capped && !txn->multi) {
            SHL_ERR(capped_trim(txn, coll, rid, st));
        }
    }
    if (rid_out != NULL) {
        *rid_out = rid;
    }
done:
    keysets_cleanup(keys, coll->nindexes);
    bson_destroy(&o2);
    return ret;
}

/* Whether 'coll' keeps pre-images for change streams (changeStreamPreAndPostImages). */
static bool
pre_images_enabled(const shl_collection_t *coll)
{
    bson_iter_t it, sub;
    return coll->options != NULL &&
           shl_bson_iter_find_key(&it, coll->options, "changeStreamPreAndPostImages") &&
           BSON_ITER_HOLDS_DOCUMENT(&it) && bson_iter_recurse(&it, &sub) &&
           bson_iter_find(&sub, "enabled") && bson_iter_as_bool(&sub);
}

/* The caller's extra fields of an entry (none when 'wo' is NULL). */
static const bson_t *
oplog_extra(const shl_write_opts_t *wo)
{
    return wo != NULL ? wo->oplog_extra : NULL;
}

/* The pre-image record {_id: {nsUUID, ts, applyOpsIndex}, operationTime, preImage} of
 * collection 'uuid' in txn at its last write's timestamp (no oplog entry of its own). */
static int
put_pre_image(shl_storage_txn_t *txn, const uint8_t *uuid, uint64_t ts, int64_t index,
              const bson_t *before, shl_status_t *st)
{
    shl_collection_t *pc = shl_catalog_get(txn->eng, SHL_PREIMAGES_NS);
    bson_t rec = BSON_INITIALIZER, id;
    int ret = 0;

    if (pc == NULL) {
        goto done;
    }
    BSON_APPEND_DOCUMENT_BEGIN(&rec, "_id", &id);
    shl_bson_append_uuid(&id, "nsUUID", uuid);
    BSON_APPEND_TIMESTAMP(&id, "ts", SHL_TS_SECS(ts), SHL_TS_INC(ts));
    BSON_APPEND_INT64(&id, "applyOpsIndex", index);
    bson_append_document_end(&rec, &id);
    BSON_APPEND_DATE_TIME(&rec, "operationTime",
                          txn->wall_ms != 0 ? txn->wall_ms : shl_clock_wall_ms());
    BSON_APPEND_DOCUMENT(&rec, "preImage", before);
    SHL_ERR(shl_doc_upsert_derived(txn, pc, &rec, NULL, st));
done:
    shl_collection_release(pc);
    bson_destroy(&rec);
    return ret;
}

/*
 * MongoDB's pre-image record: the document 'before' the write at 'ts' to a collection with
 * changeStreamPreAndPostImages goes to config.system.preimages as {_id: {nsUUID, ts,
 * applyOpsIndex: 0}, operationTime, preImage}, in the write's transaction and at its
 * timestamp, without an oplog entry of its own: a secondary or recovery applying the entry
 * runs this same code (replay mode) and writes the same record. A multi-document
 * transaction's op keeps it with the op until the transaction's entries are written
 * (shl_txn_write_pre_images); replaying such an op writes it under the op's index. None for
 * a migration's writes (no event shows them) or a node without the collection.
 */
static int
write_pre_image(shl_storage_txn_t *txn, const shl_collection_t *coll, const bson_t *before,
                uint64_t ts, shl_status_t *st)
{
    if (tls_from_migrate || !pre_images_enabled(coll)) {
        return 0;
    }
    if (txn->multi) {
        shl_txn_keep_pre_image(txn, before);
        return 0;
    }
    return put_pre_image(txn, coll->uuid, ts, txn->fixed_ts != 0 ? txn->txn_op_index : 0, before,
                         st);
}

int
shl_txn_write_pre_images(shl_storage_txn_t *txn, const shl_storage_txn_t *src, uint64_t ts,
                         shl_status_t *st)
{
    int ret = 0;

    for (size_t i = 0; i < src->nops; i++) {
        bson_iter_t it;
        const uint8_t *uuid = NULL;
        uint32_t len = 0;
        bson_subtype_t sub;
        if (src->op_pres[i] == NULL || !shl_bson_iter_find_key(&it, src->ops[i], "ui") ||
            !BSON_ITER_HOLDS_BINARY(&it)) {
            continue;
        }
        bson_iter_binary(&it, &sub, &len, &uuid);
        if (len == 16) {
            SHL_ERR(put_pre_image(txn, uuid, ts, (int64_t)i, src->op_pres[i], st));
        }
    }
done:
    return ret;
}

int
shl_doc_update(shl_storage_txn_t *txn, const shl_collection_t *coll, int64_t rid,
               const bson_t *old_doc, const bson_t *new_doc, const shl_write_opts_t *wo,
               shl_status_t *st)
{
    shl_keyset_t *oldk = NULL, *newk = NULL, *added = NULL, *removed = NULL;
    bson_t read = BSON_INITIALIZER, o2 = BSON_INITIALIZER;
    size_t n = coll->nindexes, i = 0;
    bool found, dup = false;
    uint64_t ts;
    int ret = 0;

    SHL_ERR(check_target(coll, st));
    if (old_doc == NULL) {
        bson_destroy(&read);
        SHL_ERR(shl_record_get(txn, coll, rid, &read, &found, st));
        if (!found) {
            SHL_FAIL(st, SHL_CODE_NO_SUCH_KEY, "RecordId %lld not found in %s", (long long)rid,
                     coll->ns);
        }
        old_doc = &read;
    }
    bson_destroy(&o2);
    if (!id_doc(new_doc, &o2)) {
        SHL_FAIL(st, SHL_CODE_BAD_VALUE, "replacement document has no _id");
    }
    SHL_ERR(keys_for_all(coll, old_doc, &oldk, st));
    SHL_ERR(keys_for_all(coll, new_doc, &newk, st));
    added = bson_malloc0((n + 1) * sizeof(*added));
    removed = bson_malloc0((n + 1) * sizeof(*removed));
    for (i = 0; i < n; i++) {
        shl_keyset_init(&added[i]);
        shl_keyset_init(&removed[i]);
        keyset_minus(&newk[i], &oldk[i], &added[i]);
        keyset_minus(&oldk[i], &newk[i], &removed[i]);
    }
    SHL_ERR(shl_txn_next_ts(txn, &ts, st));
    for (i = 0; i < n; i++) {
        SHL_ERR(shl_index_insert_keys(txn, coll->indexes[i], &added[i], rid, NULL, &dup, st));
        if (dup) {
            break;
        }
    }
    if (dup) {
        for (size_t j = 0; j < i; j++) {
            SHL_ERR(shl_index_remove_keys(txn, coll->indexes[j], &added[j], rid, st));
        }
        SHL_ERR(shl_index_dup_key_status(coll->ns, coll->indexes[i], new_doc, st));
    }
    SHL_ERR(note_multikey(txn, coll, newk, st));
    for (i = 0; i < n; i++) {
        SHL_ERR(shl_index_remove_keys(txn, coll->indexes[i], &removed[i], rid, st));
    }
    SHL_ERR(shl_record_update(txn, coll, rid, new_doc, st));
    if (txn->fixed_ts == 0) {
        /* An update by operators or a pipeline is written in MongoDB's $v:2 form (a diff),
         * o2 its documentKey; a replacement as the new document. */
        bson_t diff_o = BSON_INITIALIZER;
        bool diff = wo != NULL && wo->describe_update;
        if (diff) {
            shl_update_diff_entry_o(old_doc, new_doc, &diff_o);
            if (wo->document_key != NULL) {
                bson_reinit(&o2);
                bson_concat(&o2, wo->document_key);
            }
        }
        ret = shl_write_oplog_entry(txn, 'u', coll->ns, coll->uuid, diff ? &diff_o : new_doc, &o2,
                                    oplog_extra(wo), ts, st);
        bson_destroy(&diff_o);
        SHL_ERR(ret);
        if (wo != NULL && wo->ts != NULL) {
            *wo->ts = ts;
        }
    }
    SHL_ERR(write_pre_image(txn, coll, old_doc, ts, st));
done:
    keysets_cleanup(oldk, n);
    keysets_cleanup(newk, n);
    keysets_cleanup(added, added != NULL ? n : 0);
    keysets_cleanup(removed, removed != NULL ? n : 0);
    bson_destroy(&read);
    bson_destroy(&o2);
    return ret;
}

int
shl_doc_delete(shl_storage_txn_t *txn, const shl_collection_t *coll, int64_t rid,
               const bson_t *old_doc, const shl_write_opts_t *wo, shl_status_t *st)
{
    shl_keyset_t *keys = NULL;
    bson_t read = BSON_INITIALIZER, o = BSON_INITIALIZER;
    bool found;
    uint64_t ts;
    int ret = 0;

    SHL_ERR(check_target(coll, st));
    if (old_doc == NULL) {
        bson_destroy(&read);
        SHL_ERR(shl_record_get(txn, coll, rid, &read, &found, st));
        if (!found) {
            SHL_FAIL(st, SHL_CODE_NO_SUCH_KEY, "RecordId %lld not found in %s", (long long)rid,
                     coll->ns);
        }
        old_doc = &read;
    }
    bson_destroy(&o);
    if (wo != NULL && wo->document_key != NULL) {
        bson_copy_to(wo->document_key, &o);
    } else {
        id_doc(old_doc, &o);
    }
    SHL_ERR(keys_for_all(coll, old_doc, &keys, st));
    SHL_ERR(shl_txn_next_ts(txn, &ts, st));
    for (size_t i = 0; i < coll->nindexes; i++) {
        SHL_ERR(shl_index_remove_keys(txn, coll->indexes[i], &keys[i], rid, st));
    }
    SHL_ERR(shl_record_delete(txn, coll, rid, st));
    if (txn->fixed_ts == 0) {
        SHL_ERR(shl_write_oplog_entry(txn, 'd', coll->ns, coll->uuid, &o, NULL, oplog_extra(wo),
                                      ts, st));
        if (wo != NULL && wo->ts != NULL) {
            *wo->ts = ts;
        }
    }
    SHL_ERR(write_pre_image(txn, coll, old_doc, ts, st));
done:
    keysets_cleanup(keys, coll->nindexes);
    bson_destroy(&read);
    bson_destroy(&o);
    return ret;
}

int
shl_doc_upsert_by_id(shl_storage_txn_t *txn, const shl_collection_t *coll, const bson_t *doc,
                     const bson_value_t *id, int64_t *rid_out, shl_status_t *st)
{
    bson_t cur = BSON_INITIALIZER;
    int64_t rid = 0;
    bool found = false;
    int ret = 0;

    bson_destroy(&cur);
    SHL_ERR(shl_doc_find_by_id(txn, coll, id, &cur, &rid, &found, st));
    if (found) {
        SHL_ERR(shl_doc_update(txn, coll, rid, &cur, doc, NULL, st));
    } else {
        SHL_ERR(shl_doc_insert(txn, coll, doc, NULL, &rid, st));
    }
    if (rid_out != NULL) {
        *rid_out = rid;
    }
done:
    bson_destroy(&cur);
    return ret;
}

/* Versioned collections: how many times a version is rewritten in place before the next write
 * moves it to a new RecordId, and the slots that count it (storage_private.h; the count fits
 * the slot's low 8 bits). A WiredTiger key then holds at most SHL_VERSION_IN_PLACE_MAX + 2
 * updates (insert, rewrites, remove), however long the snapshot history window: a chain of 50
 * costs each update a short walk (WiredTiger's obsolete check), while a move (a record and an
 * _id entry removed and inserted again, the removed keys kept in the pages' skip lists for the
 * window) costs several times an in-place write, so moves are kept rare: one write in 49
 * (issue 13, bench/README.md "perf13b"; 6 in place measured +9.8 us server CPU per retryable
 * insert at 32 connections against +5.1 us with 48, and 200 no better than 48). */
#define SHL_VERSION_IN_PLACE_MAX 48
_Static_assert(SHL_VERSION_IN_PLACE_MAX < 0xff, "the in-place count is the slot's low byte");

/* The slot of version 'rid' (the array made on first use). */
static atomic_ullong *
version_slot(shl_rs_state_t *rs, int64_t rid)
{
    shl_version_slots_t *slots = atomic_load(&rs->version_slots);

    if (slots == NULL) {
        shl_version_slots_t *mine = bson_malloc0(sizeof(*mine));
        if (atomic_compare_exchange_strong(&rs->version_slots, &slots, mine)) {
            slots = mine;
        } else {
            bson_free(mine); /* another writer's array won: 'slots' holds it now */
        }
    }
    return &slots->slot[(uint64_t)rid % SHL_VERSION_SLOTS];
}

/* Whether version 'rid' may take one more write in place (then counted): only while its slot
 * names it with fewer than SHL_VERSION_IN_PLACE_MAX such writes. */
static bool
version_take_in_place(shl_rs_state_t *rs, int64_t rid)
{
    atomic_ullong *slot = version_slot(rs, rid);
    unsigned long long v = atomic_load_explicit(slot, memory_order_relaxed);
    bool ok = (v >> 8) == (unsigned long long)rid && (v & 0xff) < SHL_VERSION_IN_PLACE_MAX;

    if (ok) {
        atomic_store_explicit(slot, v + 1, memory_order_relaxed);
    }
    return ok;
}

/* Version 'rid' is new: it may take SHL_VERSION_IN_PLACE_MAX writes in place. */
static void
version_started(shl_rs_state_t *rs, int64_t rid)
{
    atomic_store_explicit(version_slot(rs, rid), (unsigned long long)rid << 8,
                          memory_order_relaxed);
}

/*
 * A versioned collection (catalog.h SHL_COLL_OPT_VERSIONED): with a hint *rid whose version
 * may still be rewritten in place (version_take_in_place), 'doc' replaces it there. Otherwise
 * 'doc' (with _id 'id') becomes a new record under a fresh RecordId with a new _id index
 * entry, and the current version (the record *rid when it still exists, else the one the _id
 * index finds) and its entry are removed. So no WiredTiger key takes more than
 * SHL_VERSION_IN_PLACE_MAX + 2 writes, and most writes cost one record update. *rid (may be
 * NULL) receives the RecordId. The txn is in replay mode (fixed timestamp, no oplog entry).
 */
static int
upsert_versioned(shl_storage_txn_t *txn, const shl_collection_t *coll, const bson_t *doc,
                 const bson_value_t *id, int64_t *rid, shl_status_t *st)
{
    const shl_index_t *idx = coll->indexes[0];
    bson_t cur = BSON_INITIALIZER;
    shl_keyset_t idk;
    int64_t old = rid != NULL ? *rid : 0, nrid = 0;
    bool found = false;
    uint64_t ts;
    size_t klen;
    const uint8_t *k;
    int ret = 0;

    shl_keyset_init(&idk);
    SHL_ERR(shl_txn_next_ts(txn, &ts, st));
    if (old != 0 && coll->nindexes == 1 && version_take_in_place(coll->rs, old)) {
        ret = shl_record_update(txn, coll, old, doc, st);
        if (ret == 0) {
            nrid = old;
            goto done;
        }
        if (ret != SHL_CODE_NO_SUCH_KEY) {
            goto done;
        }
        shl_status_clear(st); /* gone since (reaped): look it up below */
        old = 0;
        ret = 0;
    }
    if (coll->nindexes != 1) {
        /* Other indexes need the old document's keys: the general delete and insert. */
        bson_destroy(&cur);
        SHL_ERR(shl_doc_find_by_id(txn, coll, id, &cur, &old, &found, st));
        if (found) {
            SHL_ERR(shl_doc_delete(txn, coll, old, &cur, NULL, st));
        }
        SHL_ERR(shl_doc_insert(txn, coll, doc, NULL, &nrid, st));
        goto done;
    }
    if (old != 0) {
        ret = shl_record_delete(txn, coll, old, st);
        if (ret == SHL_CODE_NO_SUCH_KEY) {
            shl_status_clear(st); /* gone since (reaped): look it up below */
            old = 0;
            ret = 0;
        }
        SHL_ERR(ret);
    }
    if (old == 0) {
        bson_destroy(&cur);
        SHL_ERR(shl_doc_find_by_id(txn, coll, id, &cur, &old, &found, st));
        if (found) {
            SHL_ERR(shl_record_delete(txn, coll, old, st));
        } else {
            old = 0;
        }
    }
    nrid = atomic_fetch_add(&coll->rs->next_rid, 1);
    SHL_ERR(shl_record_insert_at(txn, coll, nrid, doc, st));
    version_started(coll->rs, nrid);
    shl_index_id_key(idx, id, &idk);
    k = shl_keyset_key(&idk, 0, &klen);
    SHL_ERR(shl_index_move_version(txn, idx, k, klen, old, nrid, st));
done:
    if (ret == 0 && rid != NULL) {
        *rid = nrid;
    }
    shl_keyset_cleanup(&idk);
    bson_destroy(&cur);
    return ret;
}

int
shl_doc_upsert_derived(shl_storage_txn_t *txn, const shl_collection_t *coll, const bson_t *doc,
                       int64_t *rid, shl_status_t *st)
{
    uint64_t fixed = txn->fixed_ts;
    bson_iter_t it;
    int ret = 0;

    if (!shl_bson_iter_find_key(&it, doc, "_id")) {
        return shl_status_set(st, SHL_CODE_BAD_VALUE, "document to upsert has no _id");
    }
    SHL_INVARIANT(txn->last_ts != 0 || fixed != 0);
    /* Replay mode for this one write: the last write's timestamp, no entry appended. */
    txn->fixed_ts = fixed != 0 ? fixed : txn->last_ts;
    if (shl_collection_versioned(coll)) {
        SHL_ERR(upsert_versioned(txn, coll, doc, bson_iter_value(&it), rid, st));
        goto done;
    }
    if (rid != NULL && *rid != 0 && coll->nindexes == 1) {
        SHL_ERR(shl_txn_set_ts(txn, txn->fixed_ts, st));
        ret = shl_record_update(txn, coll, *rid, doc, st);
        if (ret == SHL_CODE_NO_SUCH_KEY) {
            shl_status_clear(st);
            *rid = 0; /* gone (reaped): insert it again below */
            ret = 0;
        }
        SHL_ERR(ret);
    }
    if (rid == NULL || *rid == 0 || coll->nindexes != 1) {
        SHL_ERR(shl_doc_upsert_by_id(txn, coll, doc, bson_iter_value(&it), rid, st));
    }
done:
    txn->fixed_ts = fixed;
    return ret;
}

int
shl_oplog_append(shl_storage_txn_t *txn, char op, const char *ns, const uint8_t *uuid,
                 const bson_t *o, const bson_t *o2, const shl_write_opts_t *wo, uint64_t *ts_out,
                 shl_status_t *st)
{
    uint64_t ts = 0;
    int ret = 0;

    if (op != 'n' && op != 'c') {
        SHL_FAIL(st, SHL_CODE_BAD_VALUE,
                 "oplog entries of type '%c' are written by "
                 "document writes",
                 op);
    }
    SHL_ERR(shl_txn_next_ts(txn, &ts, st));
    SHL_ERR(shl_write_oplog_entry(txn, op, ns, uuid, o, o2, wo != NULL ? wo->oplog_extra : NULL, ts,
                                  st));
done:
    if (ts_out != NULL) {
        *ts_out = ret == 0 ? ts : 0;
    }
    return ret;
}
