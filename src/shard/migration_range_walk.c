/*
 * migration_range_walk.c -- the documents of one shard key range on this shard
 * (migration_private.h mig_range_walk): the range deleter's count and the migration digest.
 */
#include <string.h>

#include "bson/keystring.h"
#include "net/service.h"
#include "shard/migration_private.h"
#include "storage/catalog.h"
#include "storage/index.h"
#include "storage/record_store.h"
#include "storage/storage.h"

/* Through the shard key index 'idx': [min, max) is one key range there. */
static int
walk_index(shl_storage_txn_t *txn, const shl_collection_t *coll, const shl_index_t *idx,
           const bson_t *min, const bson_t *max, bool docs, mig_range_fn fn, void *arg,
           shl_status_t *st)
{
    int ret = 0;
    shl_index_cursor_t *ic = NULL;
    shl_keystring_t kmin, kmax;
    shl_key_bound_t start, end;

    shl_keystring_init(&kmin);
    shl_keystring_init(&kmax);
    shard_key_bound_keystring(min, &kmin);
    shard_key_bound_keystring(max, &kmax);
    start.data = kmin.data;
    start.len = kmin.len;
    end.data = kmax.data;
    end.len = kmax.len;
    SHL_ERR(shl_index_cursor_open(txn, idx, &start, &end, true, &ic, st));
    for (;;) {
        int64_t rid;
        bool eof, found = false;
        bson_t doc;
        SHL_ERR(shl_index_cursor_next(ic, &rid, NULL, NULL, &eof, st));
        if (eof) {
            break;
        }
        if (!docs) {
            SHL_ERR(fn(arg, NULL, st));
            continue;
        }
        ret = shl_record_get(txn, coll, rid, &doc, &found, st);
        if (ret == 0 && found) {
            ret = fn(arg, &doc, st);
        }
        bson_destroy(&doc);
        SHL_ERR(ret);
    }
done:
    shl_index_cursor_close(ic);
    shl_keystring_cleanup(&kmin);
    shl_keystring_cleanup(&kmax);
    return ret;
}

/* No index serves the shard key: every document, those in range passed on. */
static int
walk_scan(shl_storage_txn_t *txn, const shl_collection_t *coll, const shl_shard_key_pattern_t *kp,
          const bson_t *min, const bson_t *max, mig_range_fn fn, void *arg, shl_status_t *st)
{
    int ret = 0;
    shl_record_cursor_t *rc = NULL;

    SHL_ERR(shl_record_cursor_open(txn, coll, true, &rc, st));
    for (;;) {
        int64_t rid;
        bson_t view;
        bool eof;
        SHL_ERR(shl_record_cursor_next(rc, &rid, &view, &eof, st));
        if (eof) {
            break;
        }
        if (mig_doc_in_range(kp, &view, min, max)) {
            SHL_ERR(fn(arg, &view, st));
        }
    }
done:
    shl_record_cursor_close(rc);
    return ret;
}

int
mig_range_walk(shard_state_t *s, const char *ns, const shl_uuid_t *uuid, const bson_t *pattern,
               const bson_t *min, const bson_t *max, bool docs, mig_range_fn fn, void *arg,
               bool *present, shl_status_t *st)
{
    int ret = 0;
    shl_shard_key_pattern_t kp;
    bool kp_init = false, locked = false;
    shl_storage_engine_t *eng = s->svc->storage;
    shl_coll_handle_t h;
    const shl_index_t *idx = NULL;
    shl_storage_txn_t *txn = NULL;

    *present = false;
    memset(&h, 0, sizeof(h));
    SHL_ERR(shl_shard_key_pattern_init(&kp, pattern, st));
    kp_init = true;
    SHL_ERR(shl_storage_coll_acquire(eng, ns, SHL_LOCK_SHARED, &h, st));
    locked = true;
    if (h.coll == NULL || memcmp(h.coll->uuid, uuid->bytes, 16) != 0) {
        goto done;
    }
    *present = true;
    for (size_t i = 0; i < h.coll->nindexes && idx == NULL; i++) {
        if (shard_key_index_serves(h.coll->indexes[i], &kp.pattern)) {
            idx = h.coll->indexes[i];
        }
    }
    SHL_ERR(shl_storage_txn_begin(eng, NULL, &txn, st));
    if (idx != NULL) {
        SHL_ERR(walk_index(txn, h.coll, idx, min, max, docs, fn, arg, st));
    } else {
        SHL_ERR(walk_scan(txn, h.coll, &kp, min, max, fn, arg, st));
    }
done:
    shl_storage_txn_abort(txn);
    if (locked) {
        shl_storage_coll_release(&h);
    }
    if (kp_init) {
        shl_shard_key_pattern_cleanup(&kp);
    }
    return ret;
}
