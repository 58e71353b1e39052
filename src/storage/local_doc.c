/*
 * local_doc.c -- see local_doc.h. One WiredTiger table, `_local`, logged (log=(enabled=true))
 * so WiredTiger's recovery replays it from its own log whatever the stable timestamp; key
 * "<ns>\x1f<_id>", value the BSON document.
 */
#include "storage/local_doc.h"

#include "storage/storage_private.h"

#define LOCAL_URI "table:_local"

int
shl_local_docs_create_table(shl_storage_engine_t *eng, shl_status_t *st)
{
    shl_wt_session_t *s = NULL;
    int ret = 0, wtret;

    SHL_ERR(shl_wt_session_get(eng, &s, st));
    wtret = s->wt->create(s->wt, LOCAL_URI, "key_format=S,value_format=u,log=(enabled=true)");
    if (wtret != 0) {
        SHL_ERR(shl_wt_err(st, wtret, "create _local"));
    }
done:
    shl_wt_session_put(eng, s);
    return ret;
}

int
shl_local_doc_load(shl_storage_engine_t *eng, const char *ns, const char *id, bson_t *out,
                   bool *found, shl_status_t *st)
{
    shl_wt_session_t *s = NULL;
    WT_CURSOR *c = NULL;
    WT_ITEM v;
    char *key = bson_strdup_printf("%s\x1f%s", ns, id);
    int ret = 0, wtret;

    bson_init(out);
    *found = false;
    SHL_ERR(shl_wt_session_get(eng, &s, st));
    SHL_ERR(shl_wt_cursor_get(eng, s, LOCAL_URI, &c, st));
    c->set_key(c, key);
    wtret = c->search(c);
    if (wtret == 0) {
        bson_t stored;
        if (c->get_value(c, &v) != 0 || !bson_init_static(&stored, v.data, v.size)) {
            SHL_FAIL(st, SHL_CODE_INTERNAL_ERROR, "corrupt _local entry %s", key);
        }
        bson_destroy(out);
        bson_copy_to(&stored, out);
        *found = true;
    } else if (wtret != WT_NOTFOUND) {
        SHL_ERR(shl_wt_err(st, wtret, "read _local"));
    }
done:
    if (c != NULL) {
        c->reset(c);
        shl_wt_cursor_put(s, LOCAL_URI, c);
    }
    if (s != NULL) {
        shl_wt_session_put(eng, s);
    }
    bson_free(key);
    return ret;
}

/* One attempt: insert or replace 'key' in a transaction of its own, committed without a
 * timestamp (the write is not part of the set's history) and with its log record synced (on
 * disk before the caller answers: a vote, an initial sync's end). A WiredTiger error. */
static int
write_once(WT_SESSION *wt, WT_CURSOR *c, const char *key, const WT_ITEM *v)
{
    int wtret = wt->begin_transaction(wt, "isolation=snapshot");

    if (wtret == 0) {
        c->set_key(c, key);
        c->set_value(c, v);
        wtret = c->insert(c);
        if (wtret == WT_DUPLICATE_KEY) {
            c->set_key(c, key);
            c->set_value(c, v);
            wtret = c->update(c);
        }
        c->reset(c);
        wtret = wtret == 0 ? wt->commit_transaction(wt, "sync=on")
                           : (wt->rollback_transaction(wt, NULL), wtret);
    }
    return wtret;
}

int
shl_local_doc_store(shl_storage_engine_t *eng, const char *ns, const bson_t *doc,
                    shl_status_t *st)
{
    shl_wt_session_t *s = NULL;
    WT_CURSOR *c = NULL;
    WT_ITEM v;
    bson_iter_t it;
    char *key = NULL;
    int ret = 0, wtret, attempts = 0;

    if (!bson_iter_init_find(&it, doc, "_id") || !BSON_ITER_HOLDS_UTF8(&it)) {
        SHL_FAIL(st, SHL_CODE_BAD_VALUE, "a document to store in %s needs a string _id", ns);
    }
    key = bson_strdup_printf("%s\x1f%s", ns, bson_iter_utf8(&it, NULL));
    SHL_ERR(shl_wt_session_get(eng, &s, st));
    SHL_ERR(shl_wt_cursor_get(eng, s, LOCAL_URI, &c, st));
    v.data = bson_get_data(doc);
    v.size = doc->len;
    /* A concurrent store of the same key (two vote requests at once) is a write conflict:
     * try again, the last to commit wins. */
    do {
        wtret = write_once(s->wt, c, key, &v);
    } while (wtret == WT_ROLLBACK && ++attempts < 100);
    if (wtret != 0) {
        SHL_ERR(shl_wt_err(st, wtret, "write _local"));
    }
done:
    if (c != NULL) {
        shl_wt_cursor_put(s, LOCAL_URI, c);
    }
    if (s != NULL) {
        shl_wt_session_put(eng, s);
    }
    bson_free(key);
    return ret;
}
