/*
 * size_storer.c -- persisted record counts and data sizes (MongoDB's sizeStorer): the
 * unlogged, untimestamped `_sizes` table maps a record store's ident to {numRecords,
 * dataSize}. Every checkpoint (so also the final one of a clean shutdown) writes the
 * in-memory values first; start-up reads them instead of scanning every table. After a
 * clean shutdown they are exact. After a crash they are those of the last checkpoint
 * plus what replay re-applies, so writes between the last stable timestamp and that
 * checkpoint may count twice -- MongoDB's behaviour too; validate corrects them.
 */
#include "storage/storage_private.h"

#include <stdlib.h>
#include <string.h>

#define SIZES_URI "table:_sizes"

struct shl_sizes {
    shl_size_entry_t *e; /* sorted by ident (the table's key order) */
    size_t n;
};

int
shl_sizes_create_table(shl_storage_engine_t *eng, shl_status_t *st)
{
    shl_wt_session_t *s = NULL;
    int ret = 0, wtret;

    SHL_ERR(shl_wt_session_get(eng, &s, st));
    wtret = s->wt->create(s->wt, SIZES_URI, "key_format=S,value_format=qq,log=(enabled=false)");
    if (wtret != 0) {
        SHL_ERR(shl_wt_err(st, wtret, "create _sizes"));
    }
done:
    shl_wt_session_put(eng, s);
    return ret;
}

int
shl_sizes_load(shl_storage_engine_t *eng, shl_sizes_t **out, shl_status_t *st)
{
    shl_sizes_t *z = bson_malloc0(sizeof(*z));
    shl_wt_session_t *s = NULL;
    WT_CURSOR *c = NULL;
    size_t cap = 0;
    int ret = 0, wtret;

    *out = NULL;
    SHL_ERR(shl_wt_session_get(eng, &s, st));
    wtret = s->wt->open_cursor(s->wt, SIZES_URI, NULL, NULL, &c);
    if (wtret != 0) {
        SHL_ERR(shl_wt_err(st, wtret, "open _sizes"));
    }
    while ((wtret = c->next(c)) == 0) {
        const char *ident;
        int64_t n, size;
        if (c->get_key(c, &ident) != 0 || c->get_value(c, &n, &size) != 0) {
            SHL_FAIL(st, SHL_CODE_INTERNAL_ERROR, "corrupt _sizes table");
        }
        if (z->n == cap) {
            cap = cap ? cap * 2 : 16;
            z->e = bson_realloc(z->e, cap * sizeof(*z->e));
        }
        z->e[z->n].ident = bson_strdup(ident);
        z->e[z->n].num_records = n;
        z->e[z->n].data_size = size;
        z->n++;
    }
    if (wtret != WT_NOTFOUND) {
        SHL_ERR(shl_wt_err(st, wtret, "read _sizes"));
    }
    *out = z;
    z = NULL;
done:
    if (c != NULL) {
        c->close(c);
    }
    shl_wt_session_put(eng, s);
    shl_sizes_free(z);
    return ret;
}

static int
entry_cmp(const void *key, const void *elem)
{
    return strcmp((const char *)key, ((const shl_size_entry_t *)elem)->ident);
}

const shl_size_entry_t *
shl_sizes_find(const shl_sizes_t *z, const char *ident)
{
    if (z == NULL || z->n == 0) {
        return NULL;
    }
    return bsearch(ident, z->e, z->n, sizeof(*z->e), entry_cmp);
}

void
shl_sizes_free(shl_sizes_t *z)
{
    if (z == NULL) {
        return;
    }
    for (size_t i = 0; i < z->n; i++) {
        bson_free(z->e[i].ident);
    }
    bson_free(z->e);
    bson_free(z);
}

static int
str_ptr_cmp(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

int
shl_sizes_flush(shl_storage_engine_t *eng, shl_status_t *st)
{
    shl_wt_session_t *s = NULL;
    WT_CURSOR *c = NULL;
    shl_collection_t **list = NULL;
    const char **idents = NULL;
    size_t n = 0;
    bool in_txn = false;
    int ret = 0, wtret;

    shl_catalog_list(eng, NULL, &list, &n);
    idents = bson_malloc0((n + 1) * sizeof(*idents));
    for (size_t i = 0; i < n; i++) {
        idents[i] = list[i]->ident;
    }
    qsort(idents, n, sizeof(*idents), str_ptr_cmp);
    SHL_ERR(shl_wt_session_get(eng, &s, st));
    wtret = s->wt->open_cursor(s->wt, SIZES_URI, NULL, "overwrite=true", &c);
    if (wtret != 0) {
        SHL_ERR(shl_wt_err(st, wtret, "open _sizes"));
    }
    wtret = s->wt->begin_transaction(s->wt, NULL);
    if (wtret != 0) {
        SHL_ERR(shl_wt_err(st, wtret, "begin _sizes flush"));
    }
    in_txn = true;
    /* Entries of dropped record stores go (idents never repeat, so this is tidiness). */
    while ((wtret = c->next(c)) == 0) {
        const char *ident;
        if (c->get_key(c, &ident) == 0 &&
            bsearch(&ident, idents, n, sizeof(*idents), str_ptr_cmp) == NULL) {
            wtret = c->remove(c);
            if (wtret != 0) {
                SHL_ERR(shl_wt_err(st, wtret, "remove from _sizes"));
            }
        }
    }
    if (wtret != WT_NOTFOUND) {
        SHL_ERR(shl_wt_err(st, wtret, "read _sizes"));
    }
    c->reset(c);
    for (size_t i = 0; i < n; i++) {
        c->set_key(c, list[i]->ident);
        c->set_value(c, (int64_t)atomic_load(&list[i]->rs->num_records),
                     (int64_t)atomic_load(&list[i]->rs->data_size));
        wtret = c->insert(c);
        if (wtret != 0) {
            SHL_ERR(shl_wt_err(st, wtret, "write _sizes"));
        }
    }
    c->close(c);
    c = NULL;
    wtret = s->wt->commit_transaction(s->wt, NULL);
    in_txn = false;
    if (wtret != 0) {
        SHL_ERR(shl_wt_err(st, wtret, "commit _sizes flush"));
    }
done:
    if (c != NULL) {
        c->close(c);
    }
    if (in_txn) {
        s->wt->rollback_transaction(s->wt, NULL);
    }
    shl_wt_session_put(eng, s);
    bson_free(idents);
    shl_catalog_list_free(list, n);
    return ret;
}
