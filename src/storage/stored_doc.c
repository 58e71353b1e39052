/*
 * stored_doc.c -- see stored_doc.h.
 */
#include "storage/stored_doc.h"

#include "storage/catalog.h"
#include "storage/index.h"
#include "storage/write.h"

int
shl_stored_doc_load(shl_storage_engine_t *eng, const char *ns, const char *id, bson_t *out,
                    bool *found, shl_status_t *st)
{
    int ret = 0;
    shl_coll_handle_t h = {0};
    shl_storage_txn_t *txn = NULL;
    bson_t key = BSON_INITIALIZER;
    bson_iter_t it;

    bson_init(out);
    *found = false;
    SHL_ERR(shl_storage_coll_acquire(eng, ns, SHL_LOCK_SHARED, &h, st));
    if (h.coll == NULL) {
        goto done;
    }
    SHL_ERR(shl_storage_txn_begin(eng, NULL, &txn, st));
    bson_destroy(out);
    BSON_APPEND_UTF8(&key, "_id", id);
    bson_iter_init_find(&it, &key, "_id");
    SHL_ERR(shl_doc_find_by_id(txn, h.coll, bson_iter_value(&it), out, NULL, found, st));
done:
    shl_storage_txn_abort(txn);
    shl_storage_coll_release(&h);
    bson_destroy(&key);
    return ret;
}

typedef struct store_args {
    const shl_collection_t *coll;
    const bson_t *doc;
    const bson_value_t *id;
} store_args_t;

static int
store_txn(shl_storage_txn_t *txn, void *arg, shl_status_t *st)
{
    int ret = 0;
    store_args_t *a = arg;
    bson_t old;
    int64_t rid = 0;
    bool found = false;

    SHL_ERR(shl_doc_find_by_id(txn, a->coll, a->id, &old, &rid, &found, st));
    if (!found) {
        SHL_ERR(shl_doc_insert(txn, a->coll, a->doc, NULL, NULL, st));
    } else if (!bson_equal(&old, a->doc)) {
        SHL_ERR(shl_doc_update(txn, a->coll, rid, &old, a->doc, NULL, st));
    }
done:
    bson_destroy(&old);
    return ret;
}

int
shl_stored_doc_store(shl_storage_engine_t *eng, const char *ns, const bson_t *doc,
                     shl_status_t *st)
{
    int ret = 0;
    shl_coll_handle_t h = {0};
    store_args_t a;
    bson_iter_t it;
    uint64_t ts = 0;

    if (!bson_iter_init_find(&it, doc, "_id")) {
        SHL_FAIL(st, SHL_CODE_BAD_VALUE, "a document to store in %s needs an _id", ns);
    }
    if (shl_catalog_create_collection(eng, ns, NULL, NULL, NULL, st) != 0 &&
        st->code != SHL_CODE_NAMESPACE_EXISTS) {
        ret = st->code;
        goto done;
    }
    shl_status_clear(st);
    SHL_ERR(shl_storage_coll_acquire(eng, ns, SHL_LOCK_SHARED, &h, st));
    if (h.coll == NULL) {
        SHL_FAIL(st, SHL_CODE_NAMESPACE_NOT_FOUND, "%s was dropped concurrently", ns);
    }
    a.coll = h.coll;
    a.doc = doc;
    a.id = bson_iter_value(&it);
    SHL_ERR(shl_storage_write_retry(eng, store_txn, &a, &ts, st));
    /* Wait without the collection lock (docs/design/locking.md). */
    shl_storage_coll_release(&h);
    if (ts != 0) {
        SHL_ERR(shl_storage_wait_durable(eng, ts, st));
    }
done:
    shl_storage_coll_release(&h);
    return ret;
}
