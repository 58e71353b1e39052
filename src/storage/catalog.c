/*
 * catalog.c -- the durable catalog (`_catalog`: ns -> {ns, uuid, ident, options,
 * indexes: [{spec, ident, ready}]}) and its in-memory map of immutable collection
 * snapshots; DDL (create/drop/rename collection, create/drop index, drop database),
 * each one WT transaction holding the catalog change, the tables' contents and the
 * oplog 'c' entry; and the replay of 'c' entries for recovery. See catalog.h.
 */
#include "bson/bson_iter.h"
#include "storage/storage_private.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>

#include "base/clock.h"
#include "base/log.h"
#include "storage/oplog.h"
#include "storage/record_store.h"
#include "storage/write.h"
#include "bson/bson_util.h"

#define CATALOG_URI "table:_catalog"
#define OPLOG_URI "table:oplog"

/* ---------------------------------------------------------------------------------
 * UUIDs, record-store state, snapshots
 * ------------------------------------------------------------------------------ */

shl_rs_state_t *
shl_rs_state_new(void)
{
    shl_rs_state_t *rs = bson_malloc0(sizeof(*rs));
    atomic_init(&rs->refs, 1);
    atomic_init(&rs->next_rid, 1);
    {
        pthread_condattr_t ca;
        pthread_condattr_init(&ca);
        pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
        pthread_cond_init(&rs->wait_cv, &ca);
        pthread_condattr_destroy(&ca);
    }
    pthread_mutex_init(&rs->wait_mu, NULL);
    return rs;
}

void
shl_rs_state_release(shl_rs_state_t *rs)
{
    if (rs != NULL && atomic_fetch_sub(&rs->refs, 1) == 1) {
        pthread_cond_destroy(&rs->wait_cv);
        pthread_mutex_destroy(&rs->wait_mu);
        bson_free(atomic_load(&rs->version_slots));
        bson_free(rs);
    }
}

void
shl_rs_state_notify(shl_rs_state_t *rs)
{
    /* Sequentially consistent: a waiter increments 'waiters' before it re-reads the
     * sequence, we move the sequence before reading 'waiters', so one of us sees the
     * other and no wake-up is lost. */
    atomic_fetch_add(&rs->commit_seq, 1);
    if (atomic_load(&rs->waiters) > 0) {
        pthread_mutex_lock(&rs->wait_mu);
        pthread_cond_broadcast(&rs->wait_cv);
        pthread_mutex_unlock(&rs->wait_mu);
    }
}

void
shl_collection_set_counts(const shl_collection_t *c, int64_t num_records, int64_t data_size)
{
    atomic_store(&c->rs->num_records, num_records);
    atomic_store(&c->rs->data_size, data_size);
}

uint64_t
shl_collection_commit_seq(const shl_collection_t *c)
{
    return atomic_load(&c->rs->commit_seq);
}

bool
shl_collection_wait_commit(const shl_collection_t *c, uint64_t seen, int64_t deadline_mono_us)
{
    shl_rs_state_t *rs = c->rs;
    struct timespec ts = {(time_t)(deadline_mono_us / 1000000),
                          (long)(deadline_mono_us % 1000000) * 1000};
    bool changed;

    atomic_fetch_add(&rs->waiters, 1);
    pthread_mutex_lock(&rs->wait_mu);
    while (!(changed = atomic_load(&rs->commit_seq) != seen)) {
        if (pthread_cond_timedwait(&rs->wait_cv, &rs->wait_mu, &ts) == ETIMEDOUT) {
            changed = atomic_load(&rs->commit_seq) != seen;
            break;
        }
    }
    pthread_mutex_unlock(&rs->wait_mu);
    atomic_fetch_sub(&rs->waiters, 1);
    return changed;
}

static void
index_free(shl_index_t *idx)
{
    if (idx == NULL) {
        return;
    }
    bson_free(idx->name);
    if (idx->spec != NULL) {
        bson_destroy(idx->spec);
    }
    if (idx->key_pattern != NULL) {
        bson_destroy(idx->key_pattern);
    }
    bson_free(idx->ident);
    bson_free(idx->uri);
    shl_collator_release(idx->collator);
    if (idx->keygen != NULL) {
        idx->keygen->destroy(idx->keygen);
    }
    bson_free(idx);
}

shl_collection_t *
shl_collection_ref(shl_collection_t *c)
{
    atomic_fetch_add(&c->refs, 1);
    return c;
}

void
shl_collection_release(shl_collection_t *c)
{
    if (c == NULL || atomic_fetch_sub(&c->refs, 1) != 1) {
        return;
    }
    for (size_t i = 0; i < c->nindexes; i++) {
        index_free(c->indexes[i]);
    }
    bson_free(c->indexes);
    bson_free(c->ns);
    bson_free(c->db);
    if (c->options != NULL) {
        bson_destroy(c->options);
    }
    bson_free(c->ident);
    bson_free(c->uri);
    shl_rs_state_release(c->rs);
    bson_free(c);
}

/* A fresh snapshot with 'ns' (no indexes yet); takes a reference on 'rs'. */
static shl_collection_t *
coll_alloc(const char *ns, const uint8_t uuid[16], const bson_t *options, const char *ident,
           shl_rs_state_t *rs)
{
    shl_collection_t *c = bson_malloc0(sizeof(*c));
    const char *dot = strchr(ns, '.');
    bson_iter_t it;

    atomic_init(&c->refs, 1);
    c->ns = bson_strdup(ns);
    c->db = bson_strndup(ns, (size_t)(dot - ns));
    c->coll_name = c->ns + (dot - ns) + 1;
    memcpy(c->uuid, uuid, 16);
    c->options = options != NULL ? bson_copy(options) : bson_new();
    c->ident = bson_strdup(ident);
    c->uri = bson_strdup_printf("table:%s", ident);
    atomic_fetch_add(&rs->refs, 1);
    c->rs = rs;
    if (bson_iter_init_find(&it, c->options, "capped") && bson_iter_as_bool(&it)) {
        c->capped = true;
        if (bson_iter_init_find(&it, c->options, "size") && BSON_ITER_HOLDS_NUMBER(&it)) {
            c->capped_size = bson_iter_as_int64(&it);
        }
        if (bson_iter_init_find(&it, c->options, "max") && BSON_ITER_HOLDS_NUMBER(&it)) {
            c->capped_max = bson_iter_as_int64(&it);
        }
    }
    return c;
}

static void
coll_add_index(shl_collection_t *c, shl_index_t *idx)
{
    c->indexes = bson_realloc(c->indexes, (c->nindexes + 1) * sizeof(*c->indexes));
    c->indexes[c->nindexes++] = idx;
}

/* Give unique index 'idx' the versioned layout (catalog.h shl_index_t.versioned). */
static void
index_set_versioned(shl_index_t *idx)
{
    idx->versioned = true;
    idx->rid_suffix = true;
}

/* Build an index object from its stored spec and ident. */
static int
index_new(shl_storage_engine_t *eng, const bson_t *spec, const char *ident, shl_index_t **out,
          shl_status_t *st)
{
    shl_index_t *idx = bson_malloc0(sizeof(*idx));
    bson_iter_t it;
    const uint8_t *data;
    uint32_t len;
    int ret = 0;

    *out = NULL;
    idx->spec = bson_copy(spec);
    if (!bson_iter_init_find(&it, spec, "name") || !BSON_ITER_HOLDS_UTF8(&it)) {
        SHL_FAIL(st, SHL_CODE_BAD_VALUE, "index spec has no name");
    }
    idx->name = bson_strdup(bson_iter_utf8(&it, NULL));
    if (!bson_iter_init_find(&it, spec, "key") || !BSON_ITER_HOLDS_DOCUMENT(&it)) {
        SHL_FAIL(st, SHL_CODE_BAD_VALUE, "index spec has no key pattern");
    }
    bson_iter_document(&it, &len, &data);
    idx->key_pattern = bson_new_from_data(data, len);
    idx->is_id = strcmp(idx->name, "_id_") == 0;
    idx->unique =
        idx->is_id || (bson_iter_init_find(&it, spec, "unique") && bson_iter_as_bool(&it));
    idx->rid_suffix = !idx->unique;
    idx->ident = bson_strdup(ident);
    idx->uri = bson_strdup_printf("table:%s", ident);
    if (bson_iter_init_find(&it, spec, "collation")) {
        SHL_ERR(shl_collator_from_iter(&it, "collation", &idx->collator, st));
    }
    SHL_ERR(eng->keygen_factory(spec, &idx->keygen, st));
    *out = idx;
    idx = NULL;
done:
    index_free(idx);
    return ret;
}

/* A copy of 'c' under 'ns' (or the same ns when NULL), sharing indexes by rebuild. */
/* A new index object for the same table as 'src', with its flags. */
static int
index_copy(shl_storage_engine_t *eng, const shl_index_t *src, shl_index_t **out, shl_status_t *st)
{
    int ret = 0;
    shl_index_t *idx = NULL;

    SHL_ERR(index_new(eng, src->spec, src->ident, &idx, st));
    idx->multikey = src->multikey;
    idx->multikey_paths = src->multikey_paths;
    idx->num_types = src->num_types;
    idx->durable_multikey_paths = src->durable_multikey_paths;
    idx->durable_num_types = src->durable_num_types;
    idx->min_visible_ts = src->min_visible_ts;
    if (src->versioned) {
        index_set_versioned(idx);
    }
done:
    *out = ret == 0 ? idx : NULL;
    return ret;
}

static int
coll_clone(shl_storage_engine_t *eng, const shl_collection_t *c, const char *ns,
           const char *skip_index, shl_collection_t **out, shl_status_t *st)
{
    shl_collection_t *n = coll_alloc(ns != NULL ? ns : c->ns, c->uuid, c->options, c->ident, c->rs);
    int ret = 0;

    *out = NULL;
    n->min_visible_ts = c->min_visible_ts;
    for (size_t i = 0; i < c->nindexes; i++) {
        shl_index_t *idx;
        if (skip_index != NULL && strcmp(c->indexes[i]->name, skip_index) == 0) {
            continue;
        }
        SHL_ERR(index_copy(eng, c->indexes[i], &idx, st));
        coll_add_index(n, idx);
    }
    *out = n;
    n = NULL;
done:
    shl_collection_release(n);
    return ret;
}

int
shl_collection_visible_at(shl_storage_engine_t *eng, shl_collection_t *c, uint64_t ts,
                          shl_collection_t **out, shl_status_t *st)
{
    shl_collection_t *n = NULL;
    int ret = 0;
    bool hide = false;

    *out = NULL;
    SHL_ERR(shl_collection_check_visible(c, ts, st));
    for (size_t i = 0; ts != 0 && i < c->nindexes; i++) {
        hide |= c->indexes[i]->min_visible_ts > ts;
    }
    if (!hide) {
        *out = shl_collection_ref(c);
        goto done;
    }
    n = coll_alloc(c->ns, c->uuid, c->options, c->ident, c->rs);
    n->min_visible_ts = c->min_visible_ts;
    for (size_t i = 0; i < c->nindexes; i++) {
        shl_index_t *idx;
        if (c->indexes[i]->min_visible_ts > ts) {
            continue;
        }
        SHL_ERR(index_copy(eng, c->indexes[i], &idx, st));
        coll_add_index(n, idx);
    }
    *out = n;
    n = NULL;
done:
    shl_collection_release(n);
    return ret;
}

int
shl_collection_check_visible(const shl_collection_t *c, uint64_t ts, shl_status_t *st)
{
    int ret = 0;

    if (c != NULL && ts != 0 && c->min_visible_ts > ts) {
        SHL_FAIL(st, SHL_CODE_SNAPSHOT_UNAVAILABLE,
                 "Unable to read from a snapshot due to pending collection catalog changes; "
                 "please retry the operation. Snapshot timestamp is Timestamp(%u, %u). "
                 "Collection minimum is Timestamp(%u, %u)",
                 SHL_TS_SECS(ts), SHL_TS_INC(ts), SHL_TS_SECS(c->min_visible_ts),
                 SHL_TS_INC(c->min_visible_ts));
    }
done:
    return ret;
}

shl_collection_t *
shl_collection_new_oplog(const uint8_t uuid[16])
{
    shl_rs_state_t *rs = shl_rs_state_new();
    bson_t *opts = BCON_NEW("capped", BCON_BOOL(true), "size", BCON_INT64(1024LL * 1024 * 1024));
    shl_collection_t *c = coll_alloc(SHL_OPLOG_NS, uuid, opts, "oplog", rs);
    c->is_oplog = true;
    shl_rs_state_release(rs);
    bson_destroy(opts);
    return c;
}

const shl_index_t *
shl_collection_find_index(const shl_collection_t *c, const char *name)
{
    for (size_t i = 0; i < c->nindexes; i++) {
        if (strcmp(c->indexes[i]->name, name) == 0) {
            return c->indexes[i];
        }
    }
    return NULL;
}

/* Key patterns compare field names in order and values numerically/exactly. */
static bool
key_pattern_equal(const bson_t *a, const bson_t *b)
{
    bson_iter_t x, y;
    bool mx, my;

    if (!bson_iter_init(&x, a) || !bson_iter_init(&y, b)) {
        return false;
    }
    for (;;) {
        mx = shl_iter_next(&x);
        my = shl_iter_next(&y);
        if (!mx || !my) {
            return mx == my;
        }
        if (strcmp(shl_iter_key(&x), shl_iter_key(&y)) != 0) {
            return false;
        }
        if (BSON_ITER_HOLDS_NUMBER(&x) && BSON_ITER_HOLDS_NUMBER(&y)) {
            if (bson_iter_as_double(&x) != bson_iter_as_double(&y)) {
                return false;
            }
        } else if (BSON_ITER_HOLDS_UTF8(&x) && BSON_ITER_HOLDS_UTF8(&y)) {
            if (strcmp(bson_iter_utf8(&x, NULL), bson_iter_utf8(&y, NULL)) != 0) {
                return false;
            }
        } else {
            return false;
        }
    }
}

const shl_index_t *
shl_collection_find_index_by_key(const shl_collection_t *c, const bson_t *key_pattern)
{
    for (size_t i = 0; i < c->nindexes; i++) {
        if (key_pattern_equal(c->indexes[i]->key_pattern, key_pattern)) {
            return c->indexes[i];
        }
    }
    return NULL;
}

int64_t
shl_collection_num_records(const shl_collection_t *c)
{
    return atomic_load(&c->rs->num_records);
}

int64_t
shl_collection_data_size(const shl_collection_t *c)
{
    return atomic_load(&c->rs->data_size);
}

int64_t
shl_storage_ident_size(shl_storage_engine_t *eng, const char *ident)
{
    struct stat sb;
    char *path = bson_strdup_printf("%s/%s.wt", eng->dbpath, ident);
    int64_t size = stat(path, &sb) == 0 ? (int64_t)sb.st_size : 0;
    bson_free(path);
    return size;
}

/* ---------------------------------------------------------------------------------
 * The in-memory map
 * ------------------------------------------------------------------------------ */

static unsigned
ns_hash(const char *s)
{
    unsigned h = 2166136261u;
    for (; *s != '\0'; s++) {
        h = (h ^ (unsigned char)*s) * 16777619u;
    }
    return h % SHL_CAT_BUCKETS;
}

void
shl_catalog_init(shl_storage_engine_t *eng)
{
    pthread_mutex_init(&eng->cat_mu, NULL);
}

void
shl_catalog_cleanup(shl_storage_engine_t *eng)
{
    for (int b = 0; b < SHL_CAT_BUCKETS; b++) {
        shl_cat_entry_t *e = eng->cat[b], *next;
        for (; e != NULL; e = next) {
            next = e->next;
            shl_collection_release(e->coll);
            bson_free(e);
        }
        eng->cat[b] = NULL;
    }
    shl_collection_release(eng->oplog);
    eng->oplog = NULL;
    pthread_mutex_destroy(&eng->cat_mu);
}

void
shl_catalog_install(shl_storage_engine_t *eng, const char *ns, shl_collection_t *coll)
{
    shl_cat_entry_t **pp, *e;

    pthread_mutex_lock(&eng->cat_mu);
    for (pp = &eng->cat[ns_hash(ns)]; *pp != NULL && strcmp((*pp)->coll->ns, ns) != 0;
         pp = &(*pp)->next) {
    }
    e = *pp;
    if (coll == NULL) {
        if (e != NULL) {
            *pp = e->next;
            shl_collection_release(e->coll);
            bson_free(e);
        }
    } else if (e != NULL) {
        shl_collection_release(e->coll);
        e->coll = shl_collection_ref(coll);
    } else {
        e = bson_malloc0(sizeof(*e));
        e->coll = shl_collection_ref(coll);
        e->next = eng->cat[ns_hash(ns)];
        eng->cat[ns_hash(ns)] = e;
    }
    pthread_mutex_unlock(&eng->cat_mu);
}

/* The multi-document transaction whose statement this thread runs (shl_catalog_set_txn_view):
 * a pointer to the owner's pointer, which goes NULL when the transaction ends. */
static _Thread_local shl_storage_txn_t *const *tl_txn_view;

void
shl_catalog_set_txn_view(shl_storage_txn_t *const *txn)
{
    tl_txn_view = txn;
}

/* The pending entry of 'ns' (by name, or by 'uuid' when not NULL) in transaction 'txn', when
 * it has one: *found says so, the result is a new reference (NULL: pending removal). */
static shl_collection_t *
pending_entry(const shl_storage_txn_t *txn, const char *ns, const uint8_t *uuid, bool *found)
{
    shl_collection_t *c = NULL;

    *found = false;
    for (size_t i = txn != NULL ? txn->nchanges : 0; i > 0 && !*found; i--) {
        const shl_cat_change_t *ch = &txn->changes[i - 1];
        if (uuid != NULL ? ch->coll != NULL && memcmp(ch->coll->uuid, uuid, 16) == 0
                         : strcmp(ch->ns, ns) == 0) {
            *found = true;
            c = ch->coll != NULL ? shl_collection_ref(ch->coll) : NULL;
        }
    }
    return c;
}

shl_collection_t *
shl_catalog_get(shl_storage_engine_t *eng, const char *ns)
{
    shl_collection_t *c = NULL;
    bool pending = false;

    if (strcmp(ns, SHL_OPLOG_NS) == 0) {
        return shl_collection_ref(eng->oplog);
    }
    if (tl_txn_view != NULL) {
        c = pending_entry(*tl_txn_view, ns, NULL, &pending);
        if (pending) {
            return c;
        }
    }
    pthread_mutex_lock(&eng->cat_mu);
    for (shl_cat_entry_t *e = eng->cat[ns_hash(ns)]; e != NULL; e = e->next) {
        if (strcmp(e->coll->ns, ns) == 0) {
            c = shl_collection_ref(e->coll);
            break;
        }
    }
    pthread_mutex_unlock(&eng->cat_mu);
    return c;
}

shl_collection_t *
shl_catalog_get_by_uuid(shl_storage_engine_t *eng, const uint8_t uuid[16])
{
    shl_collection_t *c = NULL;

    if (memcmp(eng->oplog->uuid, uuid, 16) == 0) {
        return shl_collection_ref(eng->oplog);
    }
    if (tl_txn_view != NULL) {
        bool pending;
        c = pending_entry(*tl_txn_view, NULL, uuid, &pending);
        if (pending) {
            return c;
        }
    }
    pthread_mutex_lock(&eng->cat_mu);
    for (int b = 0; b < SHL_CAT_BUCKETS && c == NULL; b++) {
        for (shl_cat_entry_t *e = eng->cat[b]; e != NULL; e = e->next) {
            if (memcmp(e->coll->uuid, uuid, 16) == 0) {
                c = shl_collection_ref(e->coll);
                break;
            }
        }
    }
    pthread_mutex_unlock(&eng->cat_mu);
    return c;
}

shl_collection_t *
shl_oplog_collection(shl_storage_engine_t *eng)
{
    return shl_collection_ref(eng->oplog);
}

/* The collection 'ns' as this transaction sees it: its own DDL first. */
shl_collection_t *
shl_collection_current_by_uuid(shl_storage_txn_t *txn, const uint8_t uuid[16])
{
    bool pending;
    shl_collection_t *c = pending_entry(txn, NULL, uuid, &pending);

    return pending ? c : shl_catalog_get_by_uuid(txn->eng, uuid);
}

shl_collection_t *
shl_collection_current(shl_storage_txn_t *txn, const char *ns)
{
    const shl_cat_change_t *ch = shl_txn_find_change(txn, ns);
    if (ch != NULL) {
        return ch->coll != NULL ? shl_collection_ref(ch->coll) : NULL;
    }
    return shl_catalog_get(txn->eng, ns);
}

static int
coll_ns_cmp(const void *a, const void *b)
{
    const shl_collection_t *const *x = a, *const *y = b;
    return strcmp((*x)->ns, (*y)->ns);
}

void
shl_catalog_list(shl_storage_engine_t *eng, const char *db, shl_collection_t ***out, size_t *n)
{
    shl_collection_t **list = NULL;
    size_t cnt = 0, cap = 0;

    pthread_mutex_lock(&eng->cat_mu);
    for (int b = 0; b < SHL_CAT_BUCKETS; b++) {
        for (shl_cat_entry_t *e = eng->cat[b]; e != NULL; e = e->next) {
            if (db != NULL && strcmp(e->coll->db, db) != 0) {
                continue;
            }
            if (cnt == cap) {
                cap = cap ? cap * 2 : 16;
                list = bson_realloc(list, cap * sizeof(*list));
            }
            list[cnt++] = shl_collection_ref(e->coll);
        }
    }
    pthread_mutex_unlock(&eng->cat_mu);
    if (db == NULL || strcmp(db, "local") == 0) {
        list = bson_realloc(list, (cnt + 1) * sizeof(*list));
        list[cnt++] = shl_collection_ref(eng->oplog);
    }
    if (cnt > 1) {
        qsort(list, cnt, sizeof(*list), coll_ns_cmp);
    }
    *out = list;
    *n = cnt;
}

void
shl_catalog_list_free(shl_collection_t **list, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        shl_collection_release(list[i]);
    }
    bson_free(list);
}

static int
str_cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

void
shl_catalog_list_databases(shl_storage_engine_t *eng, char ***out)
{
    shl_collection_t **list;
    size_t n, cnt = 0;
    char **names;

    shl_catalog_list(eng, NULL, &list, &n);
    names = bson_malloc0((n + 1) * sizeof(*names));
    for (size_t i = 0; i < n; i++) {
        bool seen = false;
        for (size_t j = 0; j < cnt && !seen; j++) {
            seen = strcmp(names[j], list[i]->db) == 0;
        }
        if (!seen) {
            names[cnt++] = bson_strdup(list[i]->db);
        }
    }
    qsort(names, cnt, sizeof(*names), str_cmp);
    shl_catalog_list_free(list, n);
    *out = names;
}

void
shl_catalog_idents(shl_storage_engine_t *eng, char ***out)
{
    shl_collection_t **list;
    size_t n, cnt = 0, cap = 16;
    char **idents = bson_malloc0(cap * sizeof(*idents));

    shl_catalog_list(eng, NULL, &list, &n);
    for (size_t i = 0; i < n; i++) {
        const shl_collection_t *c = list[i];
        if (cnt + c->nindexes + 2 > cap) {
            cap = (cnt + c->nindexes + 2) * 2;
            idents = bson_realloc(idents, cap * sizeof(*idents));
        }
        idents[cnt++] = bson_strdup(c->ident);
        for (size_t j = 0; j < c->nindexes; j++) {
            idents[cnt++] = bson_strdup(c->indexes[j]->ident);
        }
    }
    idents[cnt] = NULL;
    shl_catalog_list_free(list, n);
    *out = idents;
}

/* ---------------------------------------------------------------------------------
 * Catalog documents
 * ------------------------------------------------------------------------------ */

static void
coll_to_doc(const shl_collection_t *c, bson_t *doc)
{
    bson_t arr, child;
    char key[16];
    const char *k;

    bson_init(doc);
    BSON_APPEND_UTF8(doc, "ns", c->ns);
    shl_bson_append_uuid(doc, "uuid", c->uuid);
    BSON_APPEND_UTF8(doc, "ident", c->ident);
    BSON_APPEND_DOCUMENT(doc, "options", c->options);
    BSON_APPEND_ARRAY_BEGIN(doc, "indexes", &arr);
    for (size_t i = 0; i < c->nindexes; i++) {
        bson_uint32_to_string((uint32_t)i, &k, key, sizeof(key));
        bson_append_document_begin(&arr, k, -1, &child);
        BSON_APPEND_DOCUMENT(&child, "spec", c->indexes[i]->spec);
        BSON_APPEND_UTF8(&child, "ident", c->indexes[i]->ident);
        BSON_APPEND_BOOL(&child, "ready", true);
        if (c->indexes[i]->versioned) {
            BSON_APPEND_BOOL(&child, "versioned", true);
        }
        if (c->indexes[i]->multikey) {
            BSON_APPEND_BOOL(&child, "multikey", true);
            BSON_APPEND_INT64(&child, "multikeyPaths", (int64_t)c->indexes[i]->multikey_paths);
        }
        BSON_APPEND_INT64(&child, "numTypes", (int64_t)c->indexes[i]->num_types);
        bson_append_document_end(&arr, &child);
    }
    bson_append_array_end(doc, &arr);
}

static int
coll_from_doc(shl_storage_engine_t *eng, const bson_t *doc, shl_collection_t **out,
              shl_status_t *st)
{
    bson_iter_t it, arr;
    const char *ns = NULL, *ident = NULL;
    const uint8_t *data;
    uint32_t len;
    uint8_t uuid[16] = {0};
    bson_t options = BSON_INITIALIZER;
    shl_collection_t *c = NULL;
    shl_rs_state_t *rs = shl_rs_state_new();
    int ret = 0;

    *out = NULL;
    if (bson_iter_init_find(&it, doc, "ns") && BSON_ITER_HOLDS_UTF8(&it)) {
        ns = bson_iter_utf8(&it, NULL);
    }
    if (bson_iter_init_find(&it, doc, "ident") && BSON_ITER_HOLDS_UTF8(&it)) {
        ident = bson_iter_utf8(&it, NULL);
    }
    if (bson_iter_init_find(&it, doc, "uuid") && BSON_ITER_HOLDS_BINARY(&it)) {
        bson_subtype_t sub;
        bson_iter_binary(&it, &sub, &len, &data);
        if (len == 16) {
            memcpy(uuid, data, 16);
        }
    }
    if (ns == NULL || ident == NULL || strchr(ns, '.') == NULL) {
        SHL_FAIL(st, SHL_CODE_INTERNAL_ERROR, "corrupt catalog entry");
    }
    if (bson_iter_init_find(&it, doc, "options") && BSON_ITER_HOLDS_DOCUMENT(&it)) {
        bson_iter_document(&it, &len, &data);
        bson_destroy(&options);
        bson_init_static(&options, data, len);
    }
    c = coll_alloc(ns, uuid, &options, ident, rs);
    if (bson_iter_init_find(&it, doc, "indexes") && BSON_ITER_HOLDS_ARRAY(&it) &&
        bson_iter_recurse(&it, &arr)) {
        while (shl_iter_next(&arr)) {
            bson_iter_t f;
            bson_t spec;
            const char *iident = NULL;
            bool multikey = false, has_paths = false, versioned = false;
            uint64_t paths = 0, num_types = SHL_NUM_TYPES_UNKNOWN; /* older entries */
            shl_index_t *idx;
            if (!BSON_ITER_HOLDS_DOCUMENT(&arr) || !bson_iter_recurse(&arr, &f)) {
                continue;
            }
            bson_init(&spec);
            while (shl_iter_next(&f)) {
                if (strcmp(shl_iter_key(&f), "spec") == 0 && BSON_ITER_HOLDS_DOCUMENT(&f)) {
                    bson_iter_document(&f, &len, &data);
                    bson_destroy(&spec);
                    bson_init_static(&spec, data, len);
                } else if (strcmp(shl_iter_key(&f), "ident") == 0 && BSON_ITER_HOLDS_UTF8(&f)) {
                    iident = bson_iter_utf8(&f, NULL);
                } else if (strcmp(shl_iter_key(&f), "multikey") == 0) {
                    multikey = bson_iter_as_bool(&f);
                } else if (strcmp(shl_iter_key(&f), "multikeyPaths") == 0) {
                    paths = (uint64_t)bson_iter_as_int64(&f);
                    has_paths = true;
                } else if (strcmp(shl_iter_key(&f), "numTypes") == 0) {
                    num_types = (uint64_t)bson_iter_as_int64(&f);
                } else if (strcmp(shl_iter_key(&f), "versioned") == 0) {
                    versioned = bson_iter_as_bool(&f);
                }
            }
            if (iident == NULL) {
                SHL_FAIL(st, SHL_CODE_INTERNAL_ERROR, "corrupt index entry in catalog for %s", ns);
            }
            SHL_ERR(index_new(eng, &spec, iident, &idx, st));
            idx->multikey = multikey;
            /* Entries from before per-field paths: every field may hold arrays. */
            idx->multikey_paths = multikey ? (has_paths ? paths : ~(uint64_t)0) : 0;
            idx->num_types = num_types;
            idx->durable_multikey_paths = idx->multikey_paths;
            idx->durable_num_types = idx->num_types;
            if (versioned && idx->unique) {
                index_set_versioned(idx);
            }
            coll_add_index(c, idx);
        }
    }
    *out = c;
    c = NULL;
done:
    shl_collection_release(c);
    shl_rs_state_release(rs);
    return ret;
}

/* Write (insert or replace) the catalog entry of 'c' at the txn's timestamp. */
static int
catalog_put(shl_storage_txn_t *txn, const shl_collection_t *c, shl_status_t *st)
{
    WT_CURSOR *cur = NULL;
    bson_t doc;
    WT_ITEM v;
    int ret = 0, wtret;

    coll_to_doc(c, &doc);
    v.data = bson_get_data(&doc);
    v.size = doc.len;
    SHL_ERR(shl_wt_cursor_get(txn->eng, txn->sess, CATALOG_URI, &cur, st));
    cur->set_key(cur, c->ns);
    cur->set_value(cur, &v);
    wtret = cur->insert(cur);
    if (wtret == WT_DUPLICATE_KEY) {
        cur->set_key(cur, c->ns);
        cur->set_value(cur, &v);
        wtret = cur->update(cur);
    }
    if (wtret != 0) {
        SHL_ERR(shl_wt_err(st, wtret, "catalog write"));
    }
done:
    if (cur != NULL) {
        shl_wt_cursor_put(txn->sess, CATALOG_URI, cur);
    }
    bson_destroy(&doc);
    return ret;
}

static int
catalog_remove(shl_storage_txn_t *txn, const char *ns, shl_status_t *st)
{
    WT_CURSOR *cur = NULL;
    int ret = 0, wtret;

    SHL_ERR(shl_wt_cursor_get(txn->eng, txn->sess, CATALOG_URI, &cur, st));
    cur->set_key(cur, ns);
    wtret = cur->remove(cur);
    if (wtret != 0 && wtret != WT_NOTFOUND) {
        SHL_ERR(shl_wt_err(st, wtret, "catalog remove"));
    }
done:
    if (cur != NULL) {
        shl_wt_cursor_put(txn->sess, CATALOG_URI, cur);
    }
    return ret;
}

/*
 * Publish multikey paths / numeric types in the installed (in-memory) metadata now, before
 * the writing transaction commits. A query plans from metadata it reads after its snapshot
 * is taken (exec_plan_build); any document its snapshot shows was committed after this
 * publication, so the plan never treats as non-multikey an index holding arrays the query
 * can see. If the transaction aborts the flags stay set: conservative, and only in memory
 * (the durable entry is written by the transaction). A compare-and-swap on the installed
 * snapshot keeps concurrent publishers' flags.
 */
static bool
cat_swap(shl_storage_engine_t *eng, const shl_collection_t *cur, shl_collection_t *n)
{
    shl_cat_entry_t *e;
    bool swapped = false;

    pthread_mutex_lock(&eng->cat_mu);
    for (e = eng->cat[ns_hash(cur->ns)]; e != NULL; e = e->next) {
        if (e->coll == cur) {
            shl_collection_release(e->coll);
            e->coll = shl_collection_ref(n);
            swapped = true;
            break;
        }
    }
    pthread_mutex_unlock(&eng->cat_mu);
    return swapped;
}

static void
publish_flags_early(shl_storage_engine_t *eng, const shl_collection_t *coll, const uint64_t *paths,
                    const uint64_t *num_types)
{
    for (int attempt = 0; attempt < 100; attempt++) {
        shl_collection_t *cur = shl_catalog_get(eng, coll->ns), *n = NULL;
        shl_status_t st = SHL_STATUS_INIT;
        bool need = false, swapped = false;

        if (cur == NULL || memcmp(cur->uuid, coll->uuid, 16) != 0 ||
            cur->nindexes != coll->nindexes) {
            shl_collection_release(cur);
            return;
        }
        for (size_t i = 0; i < cur->nindexes; i++) {
            if ((paths[i] & ~cur->indexes[i]->multikey_paths) != 0 ||
                (num_types[i] & ~cur->indexes[i]->num_types) != 0) {
                need = true;
            }
        }
        if (!need || coll_clone(eng, cur, NULL, NULL, &n, &st) != 0) {
            shl_collection_release(cur);
            return;
        }
        for (size_t i = 0; i < n->nindexes; i++) {
            if (paths[i] != 0) {
                n->indexes[i]->multikey = true;
                n->indexes[i]->multikey_paths |= paths[i];
            }
            n->indexes[i]->num_types |= num_types[i];
        }
        swapped = cat_swap(eng, cur, n);
        shl_collection_release(n);
        shl_collection_release(cur);
        if (swapped) {
            return;
        }
    }
}

void
shl_catalog_raise_min_visible(shl_storage_engine_t *eng, const char *ns, const uint8_t uuid[16],
                              uint64_t ts)
{
    bool done = false;

    for (int attempt = 0; attempt < 100 && !done; attempt++) {
        shl_collection_t *cur = shl_catalog_get(eng, ns), *n = NULL;
        shl_status_t st = SHL_STATUS_INIT;

        if (cur == NULL || memcmp(cur->uuid, uuid, 16) != 0 || cur->min_visible_ts >= ts ||
            coll_clone(eng, cur, NULL, NULL, &n, &st) != 0) {
            done = true;
        } else {
            n->min_visible_ts = ts;
            done = cat_swap(eng, cur, n);
        }
        shl_collection_release(n);
        shl_collection_release(cur);
    }
}

int
shl_catalog_note_multikey(shl_storage_txn_t *txn, const shl_collection_t *coll,
                          const uint64_t *paths, const uint64_t *num_types, shl_status_t *st)
{
    const shl_cat_change_t *ch = shl_txn_find_change(txn, coll->ns);
    shl_collection_t *latest = NULL, *n = NULL;
    const shl_collection_t *cur = coll;
    bool need = false;
    int ret = 0;

    /* Start from the newest metadata (this txn's, else the installed one) so flags set
     * by writers since 'coll' was taken are kept; same collection and index list only. */
    if (ch != NULL && ch->coll != NULL) {
        cur = ch->coll;
    } else {
        latest = shl_catalog_get(txn->eng, coll->ns);
        if (latest != NULL) {
            cur = latest;
        }
    }
    if (memcmp(cur->uuid, coll->uuid, 16) != 0 || cur->nindexes != coll->nindexes) {
        cur = coll;
    }
    for (size_t i = 0; i < coll->nindexes; i++) {
        if ((paths[i] & ~cur->indexes[i]->durable_multikey_paths) != 0 ||
            (num_types[i] & ~cur->indexes[i]->durable_num_types) != 0) {
            need = true;
        }
    }
    if (!need) {
        goto done;
    }
    if (txn->fixed_ts == 0) {
        publish_flags_early(txn->eng, coll, paths, num_types);
    }
    SHL_ERR(coll_clone(txn->eng, cur, NULL, NULL, &n, st));
    for (size_t i = 0; i < n->nindexes; i++) {
        if (paths[i] != 0) {
            n->indexes[i]->multikey = true;
            n->indexes[i]->multikey_paths |= paths[i];
        }
        n->indexes[i]->num_types |= num_types[i];
        /* catalog_put writes every index's flags: that is what the entry will hold. */
        n->indexes[i]->durable_multikey_paths = n->indexes[i]->multikey_paths;
        n->indexes[i]->durable_num_types = n->indexes[i]->num_types;
    }
    SHL_ERR(catalog_put(txn, n, st));
    shl_txn_add_change(txn, n->ns, n);
    n = NULL;
done:
    shl_collection_release(n);
    shl_collection_release(latest);
    return ret;
}

/* Count, size and the largest RecordId of a collection, by scanning its table. */
int
shl_rs_state_scan(shl_storage_engine_t *eng, shl_collection_t *coll, shl_status_t *st)
{
    shl_wt_session_t *s = NULL;
    WT_CURSOR *c = NULL;
    WT_ITEM v;
    int64_t key = 0, count = 0, size = 0, max = 0;
    int ret = 0, wtret;

    SHL_ERR(shl_wt_session_get(eng, &s, st));
    wtret = s->wt->open_cursor(s->wt, coll->uri, NULL, NULL, &c);
    if (wtret != 0) {
        SHL_ERR(shl_wt_err(st, wtret, "open record store"));
    }
    while ((wtret = c->next(c)) == 0) {
        if (c->get_key(c, &key) == 0 && c->get_value(c, &v) == 0) {
            count++;
            size += (int64_t)v.size;
            max = key;
        }
    }
    if (wtret != WT_NOTFOUND) {
        SHL_ERR(shl_wt_err(st, wtret, "scan record store"));
    }
    atomic_store(&coll->rs->num_records, count);
    atomic_store(&coll->rs->data_size, size);
    atomic_store(&coll->rs->next_rid, max + 1);
done:
    if (c != NULL) {
        c->close(c);
    }
    shl_wt_session_put(eng, s);
    return ret;
}

int
shl_rs_state_init_from(shl_storage_engine_t *eng, shl_collection_t *coll, const shl_size_entry_t *e,
                       shl_status_t *st)
{
    shl_wt_session_t *s = NULL;
    WT_CURSOR *c = NULL;
    int64_t key = 0;
    int ret = 0, wtret;

    if (e == NULL) {
        return shl_rs_state_scan(eng, coll, st);
    }
    SHL_ERR(shl_wt_session_get(eng, &s, st));
    wtret = s->wt->open_cursor(s->wt, coll->uri, NULL, NULL, &c);
    if (wtret != 0) {
        SHL_ERR(shl_wt_err(st, wtret, "open record store"));
    }
    wtret = c->prev(c);
    if (wtret == 0) {
        wtret = c->get_key(c, &key);
    } else if (wtret == WT_NOTFOUND) {
        wtret = 0;
    }
    if (wtret != 0) {
        SHL_ERR(shl_wt_err(st, wtret, "read the last record"));
    }
    atomic_store(&coll->rs->num_records, e->num_records);
    atomic_store(&coll->rs->data_size, e->data_size);
    atomic_store(&coll->rs->next_rid, key + 1);
done:
    if (c != NULL) {
        c->close(c);
    }
    shl_wt_session_put(eng, s);
    return ret;
}

/* Next free ident number: above every collection-N / index-N table WT knows. */
static int
scan_idents(shl_storage_engine_t *eng, shl_status_t *st)
{
    shl_wt_session_t *s = NULL;
    WT_CURSOR *meta = NULL;
    const char *key;
    int ret = 0, wtret;
    uint64_t max = 0;

    SHL_ERR(shl_wt_session_get(eng, &s, st));
    wtret = s->wt->open_cursor(s->wt, "metadata:", NULL, NULL, &meta);
    if (wtret != 0) {
        SHL_ERR(shl_wt_err(st, wtret, "open metadata"));
    }
    while (meta->next(meta) == 0) {
        unsigned long long n;
        if (meta->get_key(meta, &key) != 0) {
            continue;
        }
        if (sscanf(key, "table:collection-%llu", &n) == 1 ||
            sscanf(key, "table:index-%llu", &n) == 1) {
            if (n > max) {
                max = n;
            }
        }
    }
    eng->next_ident = max + 1;
done:
    if (meta != NULL) {
        meta->close(meta);
    }
    shl_wt_session_put(eng, s);
    return ret;
}

int
shl_catalog_load(shl_storage_engine_t *eng, shl_status_t *st)
{
    shl_wt_session_t *s = NULL;
    WT_CURSOR *c = NULL;
    const char *ns;
    WT_ITEM v;
    shl_sizes_t *sizes = NULL;
    int ret = 0, wtret;

    SHL_ERR(scan_idents(eng, st));
    SHL_ERR(shl_sizes_load(eng, &sizes, st));
    SHL_ERR(shl_wt_session_get(eng, &s, st));
    wtret = s->wt->open_cursor(s->wt, CATALOG_URI, NULL, NULL, &c);
    if (wtret != 0) {
        SHL_ERR(shl_wt_err(st, wtret, "open catalog"));
    }
    while ((wtret = c->next(c)) == 0) {
        bson_t doc;
        shl_collection_t *coll = NULL;
        if (c->get_key(c, &ns) != 0 || c->get_value(c, &v) != 0 ||
            !bson_init_static(&doc, v.data, v.size)) {
            SHL_FAIL(st, SHL_CODE_INTERNAL_ERROR, "corrupt catalog");
        }
        SHL_ERR(coll_from_doc(eng, &doc, &coll, st));
        ret = shl_rs_state_init_from(eng, coll, shl_sizes_find(sizes, coll->ident), st);
        if (ret == 0) {
            shl_catalog_install(eng, coll->ns, coll);
        }
        shl_collection_release(coll);
        SHL_ERR(ret);
    }
    if (wtret != WT_NOTFOUND) {
        SHL_ERR(shl_wt_err(st, wtret, "read catalog"));
    }
    SHL_ERR(shl_rs_state_init_from(eng, eng->oplog, shl_sizes_find(sizes, eng->oplog->ident), st));
done:
    if (c != NULL) {
        c->close(c);
    }
    shl_wt_session_put(eng, s);
    shl_sizes_free(sizes);
    return ret;
}

/* ---------------------------------------------------------------------------------
 * Namespaces
 * ------------------------------------------------------------------------------ */

/* A namespace the catalog may hold: base/namespace.h's rules. */
static int
validate_ns(const char *ns, shl_status_t *st)
{
    shl_ns_t parsed;
    return shl_ns_parse(&parsed, ns, st);
}

static char *
cmd_ns(const char *db)
{
    return bson_strdup_printf("%s.$cmd", db);
}

static char *
new_ident(shl_storage_engine_t *eng, const char *kind)
{
    uint64_t n;
    pthread_mutex_lock(&eng->cat_mu);
    n = eng->next_ident++;
    pthread_mutex_unlock(&eng->cat_mu);
    return bson_strdup_printf("%s-%llu", kind, (unsigned long long)n);
}

/* Create a WT table inside the txn's session, with 'extra' appended to its settings; dropped
 * again if the txn aborts. */
static int
create_table(shl_storage_txn_t *txn, const char *uri, bool is_index, const char *extra,
             shl_status_t *st)
{
    const char *cfg;
    char *xcfg;
    int wtret;

    if (is_index) {
        cfg = "key_format=u,value_format=q,log=(enabled=false)";
    } else {
        cfg = txn->eng->snappy
                  ? "key_format=q,value_format=u,log=(enabled=false),block_compressor=snappy"
                  : "key_format=q,value_format=u,log=(enabled=false)";
    }
    xcfg = bson_strdup_printf("%s%s", cfg, extra);
    wtret = txn->sess->wt->create(txn->sess->wt, uri, xcfg);
    bson_free(xcfg);
    if (wtret != 0) {
        return shl_wt_err(st, wtret, "create table");
    }
    shl_txn_add_created(txn, uri);
    return 0;
}

/* The DDL's timestamp and, unless replaying, its oplog 'c' entry. */
static int
ddl_oplog(shl_storage_txn_t *txn, const char *db, const uint8_t *uuid, const bson_t *o,
          const bson_t *o2, uint64_t ts, shl_status_t *st)
{
    char *ns;
    int ret;

    if (txn->fixed_ts != 0) {
        return 0;
    }
    ns = cmd_ns(db);
    ret = shl_write_oplog_entry(txn, 'c', ns, uuid, o, o2, NULL, ts, st);
    bson_free(ns);
    return ret;
}

/* ---------------------------------------------------------------------------------
 * DDL bodies (inside one transaction; the runner holds the locks)
 * ------------------------------------------------------------------------------ */

/* The _id index spec of a collection with options 'opts': the collection's default
 * collation (stored normalised) is its collation, as in MongoDB. */
static void
append_id_index(bson_t *doc, const char *key, const bson_t *opts)
{
    bson_t child, k;
    bson_iter_t it;
    bson_append_document_begin(doc, key, -1, &child);
    BSON_APPEND_INT32(&child, "v", 2);
    BSON_APPEND_DOCUMENT_BEGIN(&child, "key", &k);
    BSON_APPEND_INT32(&k, "_id", 1);
    bson_append_document_end(&child, &k);
    BSON_APPEND_UTF8(&child, "name", "_id_");
    if (opts != NULL && bson_iter_init_find(&it, opts, "collation") &&
        BSON_ITER_HOLDS_DOCUMENT(&it)) {
        bson_append_iter(&child, "collation", -1, &it);
    }
    bson_append_document_end(doc, &child);
}

static int
body_create(shl_storage_txn_t *txn, const char *ns, const bson_t *options, const uint8_t *want_uuid,
            shl_status_t *st)
{
    shl_storage_engine_t *eng = txn->eng;
    shl_collection_t *existing = NULL, *c = NULL;
    shl_rs_state_t *rs = NULL;
    shl_index_t *idx = NULL;
    bson_t opts = BSON_INITIALIZER, o = BSON_INITIALIZER, idspec = BSON_INITIALIZER;
    bson_iter_t it;
    char *ident = NULL, *iident = NULL;
    uint8_t uuid[16];
    uint64_t ts;
    bool capped = false, versioned = false;
    int ret = 0;

    if (strcmp(ns, SHL_OPLOG_NS) == 0) {
        SHL_FAIL(st, SHL_CODE_ILLEGAL_OPERATION, "cannot create %s", ns);
    }
    SHL_ERR(validate_ns(ns, st));
    existing = shl_collection_current(txn, ns);
    if (existing != NULL) {
        SHL_FAIL(st, SHL_CODE_NAMESPACE_EXISTS, "Collection %s already exists.", ns);
    }
    /* Stored options: everything but the command name and idIndex. */
    if (options != NULL && bson_iter_init(&it, options)) {
        while (shl_iter_next(&it)) {
            const char *k = shl_iter_key(&it);
            if (strcmp(k, "create") == 0 || strcmp(k, "idIndex") == 0) {
                continue;
            }
            if (strcmp(k, SHL_COLL_OPT_VERSIONED) == 0) {
                versioned = bson_iter_as_bool(&it);
                continue;
            }
            if (strcmp(k, "capped") == 0) {
                capped = bson_iter_as_bool(&it);
            }
            bson_append_iter(&opts, k, -1, &it);
        }
    }
    if (capped) {
        if (!bson_iter_init_find(&it, &opts, "size") || !BSON_ITER_HOLDS_NUMBER(&it)) {
            SHL_FAIL(st, SHL_CODE_INVALID_OPTIONS,
                     "the 'size' field is required when 'capped' is true");
        }
        if (bson_iter_as_int64(&it) <= 0) {
            SHL_FAIL(st, SHL_CODE_INVALID_OPTIONS, "size has to be a positive number");
        }
    }
    if (want_uuid != NULL) {
        memcpy(uuid, want_uuid, 16);
    } else {
        shl_uuid_gen(uuid);
    }
    ident = new_ident(eng, "collection");
    iident = new_ident(eng, "index");
    rs = shl_rs_state_new();
    c = coll_alloc(ns, uuid, &opts, ident, rs);
    {
        bson_t *tmp = bson_new();
        append_id_index(tmp, "spec", &opts);
        bson_iter_init_find(&it, tmp, "spec");
        {
            const uint8_t *data;
            uint32_t len;
            bson_iter_document(&it, &len, &data);
            bson_destroy(&idspec);
            bson_init_static(&idspec, data, len);
            ret = index_new(eng, &idspec, iident, &idx, st);
        }
        if (ret == 0) {
            if (versioned) {
                index_set_versioned(idx);
            }
            coll_add_index(c, idx);
            idx = NULL;
        }
        bson_destroy(tmp);
        SHL_ERR(ret);
    }
    SHL_ERR(create_table(txn, c->uri, false, "", st));
    SHL_ERR(create_table(txn, c->indexes[0]->uri, true, "", st));
    SHL_ERR(shl_txn_next_ts(txn, &ts, st));
    c->min_visible_ts = ts;
    SHL_ERR(catalog_put(txn, c, st));
    BSON_APPEND_UTF8(&o, "create", c->coll_name);
    if (bson_iter_init(&it, &opts)) {
        while (shl_iter_next(&it)) {
            bson_append_iter(&o, shl_iter_key(&it), -1, &it);
        }
    }
    if (versioned) {
        BSON_APPEND_BOOL(&o, SHL_COLL_OPT_VERSIONED, true);
    }
    append_id_index(&o, "idIndex", &opts);
    SHL_ERR(ddl_oplog(txn, c->db, uuid, &o, NULL, ts, st));
    shl_txn_add_change(txn, ns, c);
    c = NULL;
done:
    shl_collection_release(existing);
    shl_collection_release(c);
    shl_rs_state_release(rs);
    index_free(idx);
    bson_destroy(&opts);
    bson_destroy(&o);
    bson_free(ident);
    bson_free(iident);
    return ret;
}

/* Drop 'c' in this txn at 'ts' (already reserved); no oplog entry here. */
static int
drop_coll_at(shl_storage_txn_t *txn, const shl_collection_t *c, uint64_t ts, shl_status_t *st)
{
    int ret = 0;

    SHL_ERR(catalog_remove(txn, c->ns, st));
    shl_txn_add_change(txn, c->ns, NULL);
    shl_txn_add_dropped(txn, c->uri, ts);
    for (size_t i = 0; i < c->nindexes; i++) {
        shl_txn_add_dropped(txn, c->indexes[i]->uri, ts);
    }
done:
    return ret;
}

static int
body_drop(shl_storage_txn_t *txn, const char *ns, bool missing_ok, shl_status_t *st)
{
    shl_collection_t *c = NULL;
    bson_t o = BSON_INITIALIZER, o2 = BSON_INITIALIZER;
    uint64_t ts;
    int ret = 0;

    if (strcmp(ns, SHL_OPLOG_NS) == 0) {
        SHL_FAIL(st, SHL_CODE_ILLEGAL_OPERATION, "cannot drop %s", ns);
    }
    c = shl_collection_current(txn, ns);
    if (c == NULL) {
        if (missing_ok) {
            goto done;
        }
        SHL_FAIL(st, SHL_CODE_NAMESPACE_NOT_FOUND, "ns not found");
    }
    SHL_ERR(shl_txn_next_ts(txn, &ts, st));
    SHL_ERR(drop_coll_at(txn, c, ts, st));
    BSON_APPEND_UTF8(&o, "drop", c->coll_name);
    BSON_APPEND_INT64(&o2, "numRecords", shl_collection_num_records(c));
    SHL_ERR(ddl_oplog(txn, c->db, c->uuid, &o, &o2, ts, st));
done:
    shl_collection_release(c);
    bson_destroy(&o);
    bson_destroy(&o2);
    return ret;
}

static int
body_rename(shl_storage_txn_t *txn, const char *from, const char *to, bool drop_target,
            bool missing_ok, shl_status_t *st)
{
    shl_collection_t *src = NULL, *tgt = NULL, *n = NULL;
    bson_t o = BSON_INITIALIZER;
    uint64_t ts;
    int ret = 0;
    const char *d1 = strchr(from, '.'), *d2 = strchr(to, '.');

    SHL_ERR(validate_ns(to, st));
    if (strcmp(from, SHL_OPLOG_NS) == 0 || strcmp(to, SHL_OPLOG_NS) == 0) {
        SHL_FAIL(st, SHL_CODE_ILLEGAL_OPERATION, "cannot rename %s", SHL_OPLOG_NS);
    }
    if (d1 == NULL || d2 == NULL || d1 - from != d2 - to ||
        strncmp(from, to, (size_t)(d1 - from)) != 0) {
        SHL_FAIL(st, SHL_CODE_ILLEGAL_OPERATION, "cannot rename across databases");
    }
    if (strcmp(from, to) == 0) {
        SHL_FAIL(st, SHL_CODE_ILLEGAL_OPERATION, "Can't rename a collection to itself");
    }
    src = shl_collection_current(txn, from);
    if (src == NULL) {
        if (missing_ok) {
            goto done;
        }
        SHL_FAIL(st, SHL_CODE_NAMESPACE_NOT_FOUND, "source namespace does not exist");
    }
    tgt = shl_collection_current(txn, to);
    if (tgt != NULL && !drop_target) {
        SHL_FAIL(st, SHL_CODE_NAMESPACE_EXISTS, "target namespace exists");
    }
    SHL_ERR(shl_txn_next_ts(txn, &ts, st));
    if (tgt != NULL) {
        SHL_ERR(drop_coll_at(txn, tgt, ts, st));
    }
    SHL_ERR(coll_clone(txn->eng, src, to, NULL, &n, st));
    n->min_visible_ts = ts; /* the name had another collection (or none) before */
    SHL_ERR(catalog_remove(txn, from, st));
    SHL_ERR(catalog_put(txn, n, st));
    BSON_APPEND_UTF8(&o, "renameCollection", from);
    BSON_APPEND_UTF8(&o, "to", to);
    BSON_APPEND_BOOL(&o, "stayTemp", false);
    if (tgt != NULL) {
        shl_bson_append_uuid(&o, "dropTarget", tgt->uuid);
    }
    SHL_ERR(ddl_oplog(txn, src->db, src->uuid, &o, NULL, ts, st));
    shl_txn_add_change(txn, from, NULL);
    shl_txn_add_change(txn, to, n);
    n = NULL;
done:
    shl_collection_release(src);
    shl_collection_release(tgt);
    shl_collection_release(n);
    bson_destroy(&o);
    return ret;
}

/* {v: 2, key, name, <the rest in order>}; errors for a malformed spec. */
static int
normalize_spec(const bson_t *spec, bson_t *out, shl_status_t *st)
{
    bson_iter_t it;
    const uint8_t *data;
    uint32_t len;
    bson_t key;
    const char *name;
    int ret = 0;

    bson_init(out);
    if (!bson_iter_init_find(&it, spec, "key")) {
        SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE,
                 "The 'key' field is a required property of an index specification");
    }
    if (!BSON_ITER_HOLDS_DOCUMENT(&it)) {
        SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH, "The field 'key' must be an object");
    }
    bson_iter_document(&it, &len, &data);
    bson_init_static(&key, data, len);
    if (bson_count_keys(&key) == 0) {
        SHL_FAIL(st, SHL_CODE_CANNOT_CREATE_INDEX, "Index keys cannot be empty.");
    }
    if (!bson_iter_init_find(&it, spec, "name")) {
        SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE,
                 "The 'name' field is a required property of an index specification");
    }
    if (!BSON_ITER_HOLDS_UTF8(&it)) {
        SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH, "The field 'name' must be a string");
    }
    name = bson_iter_utf8(&it, NULL);
    if (name[0] == '\0') {
        SHL_FAIL(st, SHL_CODE_CANNOT_CREATE_INDEX, "index name cannot be empty");
    }
    BSON_APPEND_INT32(out, "v", 2);
    BSON_APPEND_DOCUMENT(out, "key", &key);
    BSON_APPEND_UTF8(out, "name", name);
    bson_iter_init(&it, spec);
    while (shl_iter_next(&it)) {
        const char *k = shl_iter_key(&it);
        if (strcmp(k, "v") == 0 || strcmp(k, "key") == 0 || strcmp(k, "name") == 0 ||
            strcmp(k, "ns") == 0 || strcmp(k, "createIndexes") == 0) {
            continue;
        }
        if (strcmp(k, "hidden") == 0 && !bson_iter_as_bool(&it)) {
            continue; /* a visible index has no 'hidden' field, as in MongoDB */
        }
        bson_append_iter(out, k, -1, &it);
    }
done:
    return ret;
}

/* Options that make two specs with the same name "the same index". */
static bool
spec_equivalent(const bson_t *a, const bson_t *b)
{
    bson_iter_t x, y;
    const char *fields[] = {"unique",    "sparse", "expireAfterSeconds", "partialFilterExpression",
                            "collation", NULL};
    bson_t ka, kb;
    const uint8_t *d;
    uint32_t l;

    if (!bson_iter_init_find(&x, a, "key") || !bson_iter_init_find(&y, b, "key")) {
        return false;
    }
    bson_iter_document(&x, &l, &d);
    bson_init_static(&ka, d, l);
    bson_iter_document(&y, &l, &d);
    bson_init_static(&kb, d, l);
    if (!key_pattern_equal(&ka, &kb)) {
        return false;
    }
    for (int i = 0; fields[i] != NULL; i++) {
        bool hx = bson_iter_init_find(&x, a, fields[i]);
        bool hy = bson_iter_init_find(&y, b, fields[i]);
        if (strcmp(fields[i], "unique") == 0 || strcmp(fields[i], "sparse") == 0) {
            if ((hx && bson_iter_as_bool(&x)) != (hy && bson_iter_as_bool(&y))) {
                return false;
            }
        } else if (hx != hy) {
            return false;
        } else if (hx) {
            bson_t vx = BSON_INITIALIZER, vy = BSON_INITIALIZER;
            bool eq;
            bson_append_value(&vx, "v", 1, bson_iter_value(&x));
            bson_append_value(&vy, "v", 1, bson_iter_value(&y));
            eq = bson_equal(&vx, &vy);
            bson_destroy(&vx);
            bson_destroy(&vy);
            if (!eq) {
                return false;
            }
        }
    }
    return true;
}

/*
 * What a document's keys tell an index being built: multikey (several keys, or an array on
 * a key path -- and which fields held arrays) and the numeric types each field held. Every
 * build path records them, or the planner would intersect bounds over arrays.
 */
static void
note_build_keys(shl_index_t *idx, const shl_keyset_t *keys)
{
    if (keys->n > 1 || keys->array_paths != 0) {
        idx->multikey = true;
        idx->multikey_paths |= keys->array_paths != 0 ? keys->array_paths : ~(uint64_t)0;
    }
    idx->num_types |= keys->num_types;
}

/*
 * One batch of a build: index the records after *last_rid until about
 * index_build_batch_keys keys, in a transaction of its own at a timestamp of its own
 * (no oplog entry: the index is published by the DDL's entry). *eof: nothing is left.
 * The caller holds the collection exclusively, so the batches see one state.
 */
static int
build_batch(shl_storage_engine_t *eng, const shl_collection_t *c, shl_index_t *idx,
            shl_keyset_t *keys, int64_t *last_rid, bool *eof, shl_status_t *st)
{
    shl_storage_txn_t *txn = NULL;
    shl_record_cursor_t *rc = NULL;
    int64_t nkeys = 0;
    int64_t limit =
        eng->index_build_batch_keys > 0 ? eng->index_build_batch_keys : SHL_INDEX_BUILD_BATCH_KEYS;
    uint64_t ts;
    int ret = 0;

    *eof = false;
    SHL_ERR(shl_storage_txn_begin(eng, NULL, &txn, st));
    SHL_ERR(shl_txn_next_ts(txn, &ts, st));
    SHL_ERR(shl_record_cursor_open(txn, c, true, &rc, st));
    if (*last_rid > 0) {
        shl_record_cursor_seek(rc, *last_rid + 1);
    }
    while (nkeys < limit) {
        int64_t rid;
        bson_t doc;
        bool dup;
        SHL_ERR(shl_record_cursor_next(rc, &rid, &doc, eof, st));
        if (*eof) {
            break;
        }
        SHL_ERR(shl_index_keys_for_doc(idx, &doc, keys, st));
        note_build_keys(idx, keys);
        SHL_ERR(shl_index_insert_keys(txn, idx, keys, rid, NULL, &dup, st));
        if (dup) {
            SHL_ERR(shl_index_dup_key_status(c->ns, idx, &doc, st));
        }
        nkeys += keys->n > 0 ? (int64_t)keys->n : 1;
        *last_rid = rid;
    }
    shl_record_cursor_close(rc);
    rc = NULL;
    ret = shl_storage_txn_commit(txn, st);
    txn = NULL;
    SHL_ERR(ret);
done:
    shl_record_cursor_close(rc);
    shl_storage_txn_abort(txn);
    return ret;
}

static int
build_in_batches(shl_storage_engine_t *eng, const shl_collection_t *c, shl_index_t *idx,
                 shl_keyset_t *keys, shl_status_t *st)
{
    int64_t last_rid = 0, batch = 0;
    bool eof = false;
    int ret = 0;

    while (!eof) {
        SHL_ERR(build_batch(eng, c, idx, keys, &last_rid, &eof, st));
        batch++;
        atomic_fetch_add(&eng->index_build_batches, 1);
        if (eng->index_build_hook != NULL) {
            eng->index_build_hook(eng, batch);
        }
    }
done:
    return ret;
}

static int
body_create_index(shl_storage_txn_t *txn, const char *ns, const bson_t *spec, bool missing_ok,
                  bool *created, shl_status_t *st)
{
    shl_storage_engine_t *eng = txn->eng;
    shl_collection_t *c = NULL, *n = NULL;
    shl_index_t *idx = NULL;
    shl_record_cursor_t *rc = NULL;
    shl_keyset_t keys;
    bson_t norm, o = BSON_INITIALIZER;
    bson_iter_t it;
    char *ident = NULL;
    const shl_index_t *same;
    uint64_t ts;
    int ret = 0;

    *created = false;
    shl_keyset_init(&keys);
    SHL_ERR(normalize_spec(spec, &norm, st));
    c = shl_collection_current(txn, ns);
    if (c == NULL || c->is_oplog) {
        if (missing_ok) {
            goto done;
        }
        SHL_FAIL(st, c == NULL ? SHL_CODE_NAMESPACE_NOT_FOUND : SHL_CODE_ILLEGAL_OPERATION,
                 "ns does not exist: %s", ns);
    }
    bson_iter_init_find(&it, &norm, "name");
    same = shl_collection_find_index(c, bson_iter_utf8(&it, NULL));
    if (same != NULL) {
        if (spec_equivalent(same->spec, &norm)) {
            goto done; /* already there: createIndexes says so, no error */
        }
        if (missing_ok) {
            goto done;
        }
        {
            char *want = shl_bson_as_json(&norm);
            char *have = shl_bson_as_json(same->spec);
            shl_status_set(st, SHL_CODE_INDEX_KEY_SPECS_CONFLICT,
                           "An existing index has the same name as the requested index. When "
                           "index names are not specified, they are auto generated and can "
                           "cause conflicts. Please refer to our documentation. Requested "
                           "index: %s, existing index: %s",
                           want, have);
            bson_free(want);
            bson_free(have);
            ret = SHL_CODE_INDEX_KEY_SPECS_CONFLICT;
            goto done;
        }
    }
    {
        bson_t key;
        const uint8_t *d;
        uint32_t l;
        bson_iter_init_find(&it, &norm, "key");
        bson_iter_document(&it, &l, &d);
        bson_init_static(&key, d, l);
        same = shl_collection_find_index_by_key(c, &key);
        if (same != NULL && spec_equivalent(same->spec, &norm)) {
            if (missing_ok) {
                goto done;
            }
            SHL_FAIL(st, SHL_CODE_INDEX_OPTIONS_CONFLICT,
                     "Index already exists with a different name: %s", same->name);
        }
    }
    ident = new_ident(eng, "index");
    SHL_ERR(index_new(eng, &norm, ident, &idx, st));
    SHL_ERR(create_table(txn, idx->uri, true, "", st));
    if (txn->fixed_ts == 0 && shl_collection_num_records(c) > 0) {
        /* Keys go in in batches of their own transactions; this one only publishes the
         * index. Until it commits no catalog entry names the table, so a crash leaves an
         * orphan that recovery drops (and an abort drops it at once). */
        SHL_ERR(build_in_batches(eng, c, idx, &keys, st));
        SHL_ERR(shl_txn_next_ts(txn, &ts, st));
        goto built;
    }
    SHL_ERR(shl_txn_next_ts(txn, &ts, st));
    /* Build from the documents this transaction sees (replay, or an empty collection). */
    SHL_ERR(shl_record_cursor_open(txn, c, true, &rc, st));
    for (;;) {
        int64_t rid;
        bson_t doc;
        bool eof, dup;
        SHL_ERR(shl_record_cursor_next(rc, &rid, &doc, &eof, st));
        if (eof) {
            break;
        }
        SHL_ERR(shl_index_keys_for_doc(idx, &doc, &keys, st));
        note_build_keys(idx, &keys);
        SHL_ERR(shl_index_insert_keys(txn, idx, &keys, rid, NULL, &dup, st));
        if (dup) {
            SHL_ERR(shl_index_dup_key_status(c->ns, idx, &doc, st));
        }
    }
    shl_record_cursor_close(rc);
    rc = NULL;
built:
    idx->min_visible_ts = ts;
    idx->durable_multikey_paths = idx->multikey_paths; /* written by catalog_put below */
    idx->durable_num_types = idx->num_types;
    SHL_ERR(coll_clone(eng, c, NULL, NULL, &n, st));
    coll_add_index(n, idx);
    idx = NULL;
    SHL_ERR(catalog_put(txn, n, st));
    BSON_APPEND_UTF8(&o, "createIndexes", c->coll_name);
    bson_iter_init(&it, &norm);
    while (shl_iter_next(&it)) {
        bson_append_iter(&o, shl_iter_key(&it), -1, &it);
    }
    SHL_ERR(ddl_oplog(txn, c->db, c->uuid, &o, NULL, ts, st));
    shl_txn_add_change(txn, ns, n);
    n = NULL;
    *created = true;
done:
    shl_record_cursor_close(rc);
    shl_keyset_cleanup(&keys);
    shl_collection_release(c);
    shl_collection_release(n);
    index_free(idx);
    bson_destroy(&norm);
    bson_destroy(&o);
    bson_free(ident);
    return ret;
}

static int
body_drop_index(shl_storage_txn_t *txn, const char *ns, const char *name, bool missing_ok,
                shl_status_t *st)
{
    shl_collection_t *c = NULL, *n = NULL;
    const shl_index_t *idx;
    bson_t o = BSON_INITIALIZER;
    uint64_t ts;
    int ret = 0;

    c = shl_collection_current(txn, ns);
    if (c == NULL || c->is_oplog) {
        if (missing_ok) {
            goto done;
        }
        SHL_FAIL(st, SHL_CODE_NAMESPACE_NOT_FOUND, "ns not found %s", ns);
    }
    idx = shl_collection_find_index(c, name);
    if (idx == NULL) {
        if (missing_ok) {
            goto done;
        }
        SHL_FAIL(st, SHL_CODE_INDEX_NOT_FOUND, "index not found with name [%s]", name);
    }
    if (idx->is_id) {
        SHL_FAIL(st, SHL_CODE_INVALID_OPTIONS, "cannot drop _id index");
    }
    SHL_ERR(shl_txn_next_ts(txn, &ts, st));
    SHL_ERR(coll_clone(txn->eng, c, NULL, name, &n, st));
    SHL_ERR(catalog_put(txn, n, st));
    shl_txn_add_dropped(txn, idx->uri, ts);
    BSON_APPEND_UTF8(&o, "dropIndexes", c->coll_name);
    BSON_APPEND_UTF8(&o, "index", name);
    SHL_ERR(ddl_oplog(txn, c->db, c->uuid, &o, idx->spec, ts, st));
    shl_txn_add_change(txn, ns, n);
    n = NULL;
done:
    shl_collection_release(c);
    shl_collection_release(n);
    bson_destroy(&o);
    return ret;
}

/* ---------------------------------------------------------------- collMod */

/* A new copy of 'doc' with field 'key' replaced by (or, at the end, set to) 'v'; v NULL
 * removes it. */
static bson_t *
doc_with_field(const bson_t *doc, const char *key, const bson_value_t *v)
{
    bson_t *out = bson_new();
    bson_iter_t it;
    bool done = false;

    if (bson_iter_init(&it, doc)) {
        while (shl_iter_next(&it)) {
            if (strcmp(shl_iter_key(&it), key) != 0) {
                bson_append_iter(out, shl_iter_key(&it), -1, &it);
            } else if (v != NULL && !done) {
                bson_append_value(out, key, -1, v);
                done = true;
            }
        }
    }
    if (v != NULL && !done) {
        bson_append_value(out, key, -1, v);
    }
    return out;
}

/* Replace *doc by a copy with field 'key' set to 'v' (removed when NULL). */
static void
doc_set_field(bson_t **doc, const char *key, const bson_value_t *v)
{
    bson_t *next = doc_with_field(*doc, key, v);
    bson_destroy(*doc);
    *doc = next;
}

/* The index a collMod's 'index' document names (by name or key pattern), or an error. */
static int
coll_mod_find_index(const shl_collection_t *c, const bson_t *ix, const shl_index_t **out,
                    shl_status_t *st)
{
    bson_iter_t it;
    int ret = 0;

    *out = NULL;
    if (bson_iter_init_find(&it, ix, "name") && BSON_ITER_HOLDS_UTF8(&it)) {
        *out = shl_collection_find_index(c, bson_iter_utf8(&it, NULL));
        if (*out == NULL) {
            SHL_FAIL(st, SHL_CODE_INDEX_NOT_FOUND, "cannot find index %s for ns %s",
                     bson_iter_utf8(&it, NULL), c->ns);
        }
    } else if (bson_iter_init_find(&it, ix, "keyPattern") && BSON_ITER_HOLDS_DOCUMENT(&it)) {
        bson_t key;
        const uint8_t *data;
        uint32_t len;
        bson_iter_document(&it, &len, &data);
        bson_init_static(&key, data, len);
        *out = shl_collection_find_index_by_key(c, &key);
        if (*out == NULL) {
            char *s = shl_bson_as_json(&key);
            shl_status_set(st, SHL_CODE_INDEX_NOT_FOUND, "cannot find index %s for ns %s", s,
                           c->ns);
            bson_free(s);
            ret = SHL_CODE_INDEX_NOT_FOUND;
        }
    } else {
        SHL_FAIL(st, SHL_CODE_INVALID_OPTIONS, "Must specify either index name or key pattern.");
    }
done:
    return ret;
}

/*
 * The index part of a collMod: the new spec of the named index in *spec_out, the fields the
 * reply reports in 'info', and the oplog form of the change ({name, expireAfterSeconds?,
 * hidden?}; a hidden value that changes nothing is left out, as MongoDB does) in 'entry'.
 */
static int
coll_mod_index(const shl_collection_t *c, const bson_t *ix, const shl_index_t **idx_out,
               bson_t **spec_out, bson_t *info, bson_t *entry, shl_status_t *st)
{
    const shl_index_t *idx = NULL;
    bson_iter_t it, old;
    bson_t *cur = NULL;
    int ret = 0;

    *spec_out = NULL;
    *idx_out = NULL;
    SHL_ERR(coll_mod_find_index(c, ix, &idx, st));
    cur = bson_copy(idx->spec);
    BSON_APPEND_UTF8(entry, "name", idx->name);
    if (bson_iter_init_find(&it, ix, "expireAfterSeconds")) {
        if (idx->is_id) {
            SHL_FAIL(st, SHL_CODE_INVALID_OPTIONS,
                     "the \"expireAfterSeconds\" option is not supported on the _id index");
        }
        if (bson_count_keys(idx->key_pattern) != 1) {
            SHL_FAIL(st, SHL_CODE_INVALID_OPTIONS,
                     "TTL indexes are single-field indexes, compound indexes do not support TTL");
        }
        if (bson_iter_init_find(&old, cur, "expireAfterSeconds")) {
            if (!BSON_ITER_HOLDS_NUMBER(&old)) {
                SHL_FAIL(st, SHL_CODE_INVALID_OPTIONS,
                         "existing expireAfterSeconds field is not a number");
            }
            bson_append_value(info, "expireAfterSeconds_old", -1, bson_iter_value(&old));
        }
        bson_append_value(info, "expireAfterSeconds_new", -1, bson_iter_value(&it));
        bson_append_value(entry, "expireAfterSeconds", -1, bson_iter_value(&it));
        doc_set_field(&cur, "expireAfterSeconds", bson_iter_value(&it));
    }
    if (bson_iter_init_find(&it, ix, "hidden")) {
        bool want = bson_iter_as_bool(&it);
        bool was = bson_iter_init_find(&old, cur, "hidden") && bson_iter_as_bool(&old);
        if (idx->is_id && want) {
            SHL_FAIL(st, SHL_CODE_BAD_VALUE, "can't hide _id index");
        }
        if (want != was) {
            bson_value_t v;
            memset(&v, 0, sizeof(v));
            v.value_type = BSON_TYPE_BOOL;
            v.value.v_bool = true;
            BSON_APPEND_BOOL(info, "hidden_old", was);
            BSON_APPEND_BOOL(info, "hidden_new", want);
            BSON_APPEND_BOOL(entry, "hidden", want);
            /* A visible index has no 'hidden' field, as after MongoDB's unhide. */
            doc_set_field(&cur, "hidden", want ? &v : NULL);
        }
    }
    *spec_out = cur;
    cur = NULL;
    *idx_out = idx;
done:
    if (cur != NULL) {
        bson_destroy(cur);
    }
    return ret;
}

static int
body_coll_mod(shl_storage_txn_t *txn, const char *ns, const bson_t *mod, bool missing_ok,
              bson_t *info, shl_status_t *st)
{
    static const char *const coll_fields[] = {"validator", "validationLevel", "validationAction",
                                              "changeStreamPreAndPostImages", NULL};
    shl_collection_t *c = NULL, *n = NULL;
    const shl_index_t *idx = NULL;
    shl_index_t *repl = NULL;
    bson_t o = BSON_INITIALIZER, *opts = NULL, *spec = NULL, ix_entry = BSON_INITIALIZER;
    bson_iter_t it;
    uint64_t ts;
    bool has_index = false;
    int ret = 0;

    c = shl_collection_current(txn, ns);
    if (c == NULL || c->is_oplog) {
        if (missing_ok && c == NULL) {
            goto done;
        }
        SHL_FAIL(st, c == NULL ? SHL_CODE_NAMESPACE_NOT_FOUND : SHL_CODE_ILLEGAL_OPERATION,
                 c == NULL ? "ns does not exist: %s" : "cannot modify %s", ns);
    }
    BSON_APPEND_UTF8(&o, "collMod", c->coll_name);
    opts = bson_copy(c->options);
    for (int i = 0; coll_fields[i] != NULL; i++) {
        if (bson_iter_init_find(&it, mod, coll_fields[i])) {
            doc_set_field(&opts, coll_fields[i], bson_iter_value(&it));
            bson_append_value(&o, coll_fields[i], -1, bson_iter_value(&it));
        }
    }
    if (bson_iter_init_find(&it, mod, "index") && BSON_ITER_HOLDS_DOCUMENT(&it)) {
        bson_t ix;
        const uint8_t *data;
        uint32_t len;
        bson_iter_document(&it, &len, &data);
        bson_init_static(&ix, data, len);
        ret = coll_mod_index(c, &ix, &idx, &spec, info, &ix_entry, st);
        if (ret == SHL_CODE_INDEX_NOT_FOUND && missing_ok) {
            ret = 0; /* replay: a later entry dropped it */
            shl_status_clear(st);
            idx = NULL;
        }
        SHL_ERR(ret);
        has_index = idx != NULL;
        if (has_index) {
            BSON_APPEND_DOCUMENT(&o, "index", &ix_entry);
        }
    }
    SHL_ERR(shl_txn_next_ts(txn, &ts, st));
    SHL_ERR(coll_clone(txn->eng, c, NULL, NULL, &n, st));
    bson_destroy(n->options);
    n->options = bson_copy(opts);
    if (has_index) {
        for (size_t i = 0; i < n->nindexes; i++) {
            shl_index_t *old = n->indexes[i];
            if (strcmp(old->name, idx->name) != 0) {
                continue;
            }
            SHL_ERR(index_new(txn->eng, spec, old->ident, &repl, st));
            repl->multikey = old->multikey;
            repl->multikey_paths = old->multikey_paths;
            repl->num_types = old->num_types;
            repl->durable_multikey_paths = old->durable_multikey_paths;
            repl->durable_num_types = old->durable_num_types;
            n->indexes[i] = repl;
            repl = old; /* freed below */
            break;
        }
    }
    SHL_ERR(catalog_put(txn, n, st));
    SHL_ERR(ddl_oplog(txn, c->db, c->uuid, &o, NULL, ts, st));
    shl_txn_add_change(txn, ns, n);
    n = NULL;
done:
    shl_collection_release(c);
    shl_collection_release(n);
    index_free(repl);
    bson_destroy(&o);
    if (opts != NULL) {
        bson_destroy(opts);
    }
    if (spec != NULL) {
        bson_destroy(spec);
    }
    bson_destroy(&ix_entry);
    return ret;
}

static int
body_drop_database(shl_storage_txn_t *txn, const char *db, shl_status_t *st)
{
    shl_collection_t **list = NULL;
    size_t n = 0;
    bson_t o = BSON_INITIALIZER;
    uint64_t ts;
    int ret = 0;

    if (strcmp(db, "local") == 0) {
        SHL_FAIL(st, SHL_CODE_ILLEGAL_OPERATION, "Cannot drop 'local' database");
    }
    shl_catalog_list(txn->eng, db, &list, &n);
    if (n == 0) {
        goto done;
    }
    for (size_t i = 0; i < n; i++) {
        SHL_ERR(body_drop(txn, list[i]->ns, true, st));
    }
    SHL_ERR(shl_txn_next_ts(txn, &ts, st));
    BSON_APPEND_INT32(&o, "dropDatabase", 1);
    SHL_ERR(ddl_oplog(txn, db, NULL, &o, NULL, ts, st));
done:
    shl_catalog_list_free(list, n);
    bson_destroy(&o);
    return ret;
}

/* ---------------------------------------------------------------------------------
 * The DDL runner: locks, transaction, WriteConflict retry, commit (installs snapshots)
 * ------------------------------------------------------------------------------ */

typedef enum ddl_kind {
    DDL_NONE, /* replay: a command it does not know */
    DDL_CREATE,
    DDL_DROP,
    DDL_RENAME,
    DDL_CREATE_INDEX,
    DDL_DROP_INDEX,
    DDL_DROP_DB,
    DDL_COLL_MOD,
} ddl_kind_t;

typedef struct ddl_req {
    ddl_kind_t kind;
    const char *ns;      /* or db for DDL_DROP_DB */
    const char *ns2;     /* rename target */
    const char *name;    /* index name */
    const bson_t *doc;   /* options / index spec */
    const uint8_t *uuid; /* create: forced uuid */
    bool flag;           /* rename: drop_target */
    bool *created;
    bson_t *info;       /* collMod: what the reply reports */
    uint64_t replay_ts; /* != 0: replaying an oplog entry at this ts */
} ddl_req_t;

static int
ddl_body(shl_storage_txn_t *txn, ddl_req_t *r, shl_status_t *st)
{
    bool replay = r->replay_ts != 0, created = false;
    int ret = 0;

    switch (r->kind) {
    case DDL_NONE:
        break;
    case DDL_CREATE:
        ret = body_create(txn, r->ns, r->doc, r->uuid, st);
        if (ret == SHL_CODE_NAMESPACE_EXISTS && replay) {
            /* Replaying a create of a collection that exists (recovery from before it, an
             * entry applied twice): nothing to do, and no error left for the caller to see. */
            shl_status_clear(st);
            ret = 0;
        }
        break;
    case DDL_DROP:
        ret = body_drop(txn, r->ns, replay, st);
        break;
    case DDL_RENAME:
        ret = body_rename(txn, r->ns, r->ns2, r->flag, replay, st);
        break;
    case DDL_CREATE_INDEX:
        ret = body_create_index(txn, r->ns, r->doc, replay, &created, st);
        if (r->created != NULL) {
            *r->created = created;
        }
        break;
    case DDL_DROP_INDEX:
        ret = body_drop_index(txn, r->ns, r->name, replay, st);
        break;
    case DDL_DROP_DB:
        ret = body_drop_database(txn, r->ns, st);
        break;
    case DDL_COLL_MOD:
        bson_reinit(r->info);
        ret = body_coll_mod(txn, r->ns, r->doc, replay, r->info, st);
        break;
    }
    return ret;
}

static void
db_of(const char *ns, char *db, size_t len)
{
    const char *dot = strchr(ns, '.');
    size_t n = dot != NULL ? (size_t)(dot - ns) : strlen(ns);
    if (n >= len) {
        n = len - 1;
    }
    memcpy(db, ns, n);
    db[n] = '\0';
}

static int
ddl_run(shl_storage_engine_t *eng, ddl_req_t *r, uint64_t *ts_out, shl_status_t *st)
{
    shl_named_lock_t *dbl = NULL, *l1 = NULL, *l2 = NULL;
    shl_storage_txn_t *txn = NULL;
    char db[SHL_NS_MAX + 1];
    int ret = 0;
    uint64_t ts = 0;

    if (ts_out != NULL) {
        *ts_out = 0;
    }
    if (r->ns == NULL || r->ns[0] == '\0' ||
        (r->kind != DDL_DROP_DB && strchr(r->ns, '.') == NULL)) {
        SHL_FAIL(st, SHL_CODE_INVALID_NAMESPACE, "Invalid namespace specified '%s'",
                 r->ns != NULL ? r->ns : "");
    }
    if (r->kind == DDL_RENAME && strchr(r->ns2, '.') == NULL) {
        SHL_FAIL(st, SHL_CODE_INVALID_NAMESPACE, "Invalid target namespace: %s", r->ns2);
    }
    /* Lock order (docs/design/locking.md): database, then collections in byte order. */
    if (r->kind == DDL_DROP_DB) {
        dbl = shl_lock_take(eng, r->ns, true);
    } else {
        db_of(r->ns, db, sizeof(db));
        dbl = shl_lock_take(eng, db, false);
        if (r->kind == DDL_RENAME && strcmp(r->ns2, r->ns) < 0) {
            l1 = shl_lock_take(eng, r->ns2, true);
            l2 = shl_lock_take(eng, r->ns, true);
        } else {
            l1 = shl_lock_take(eng, r->ns, true);
            if (r->kind == DDL_RENAME && strcmp(r->ns2, r->ns) != 0) {
                l2 = shl_lock_take(eng, r->ns2, true);
            }
        }
    }
    for (int attempt = 0;; attempt++) {
        SHL_ERR(shl_storage_txn_begin(eng, NULL, &txn, st));
        txn->fixed_ts = r->replay_ts;
        ret = ddl_body(txn, r, st);
        if (ret == 0) {
            ts = txn->last_ts;
            ret = shl_storage_txn_commit(txn, st);
        } else {
            shl_storage_txn_abort(txn);
        }
        txn = NULL;
        if (ret != SHL_CODE_WRITE_CONFLICT || attempt > 1000) {
            break;
        }
        shl_sleep_ms(attempt < 10 ? 1 : 10);
    }
    if (ret == 0 && ts_out != NULL) {
        *ts_out = ts;
    }
done:
    shl_lock_drop(eng, l2);
    shl_lock_drop(eng, l1);
    shl_lock_drop(eng, dbl);
    return ret;
}

/* A create or createIndexes in the caller's multi-document transaction 'txn', under the
 * database lock (shared) and the collection lock (exclusive) for its length. */
static int
ddl_in_txn(shl_storage_txn_t *txn, ddl_req_t *r, shl_status_t *st)
{
    shl_named_lock_t *dbl = NULL, *l1 = NULL;
    char db[SHL_NS_MAX + 1];
    int ret = 0;

    if (r->ns == NULL || strchr(r->ns, '.') == NULL) {
        SHL_FAIL(st, SHL_CODE_INVALID_NAMESPACE, "Invalid namespace specified '%s'",
                 r->ns != NULL ? r->ns : "");
    }
    db_of(r->ns, db, sizeof(db));
    dbl = shl_lock_take(txn->eng, db, false);
    l1 = shl_lock_take(txn->eng, r->ns, true);
    ret = ddl_body(txn, r, st);
done:
    shl_lock_drop(txn->eng, l1);
    shl_lock_drop(txn->eng, dbl);
    return ret;
}

int
shl_catalog_create_collection_in_txn(shl_storage_txn_t *txn, const char *ns,
                                     const bson_t *options, shl_status_t *st)
{
    ddl_req_t r = {.kind = DDL_CREATE, .ns = ns, .doc = options};

    return ddl_in_txn(txn, &r, st);
}

int
shl_catalog_create_index_in_txn(shl_storage_txn_t *txn, const char *ns, const bson_t *spec,
                                bool *created, shl_status_t *st)
{
    ddl_req_t r = {.kind = DDL_CREATE_INDEX, .ns = ns, .doc = spec, .created = created};

    *created = false;
    return ddl_in_txn(txn, &r, st);
}

int
shl_catalog_create_collection(shl_storage_engine_t *eng, const char *ns, const bson_t *options,
                              const uint8_t *uuid, uint64_t *ts, shl_status_t *st)
{
    ddl_req_t r = {.kind = DDL_CREATE, .ns = ns, .doc = options, .uuid = uuid};
    return ddl_run(eng, &r, ts, st);
}

int
shl_catalog_drop_collection(shl_storage_engine_t *eng, const char *ns, uint64_t *ts,
                            shl_status_t *st)
{
    ddl_req_t r = {.kind = DDL_DROP, .ns = ns};
    return ddl_run(eng, &r, ts, st);
}

int
shl_catalog_rename_collection(shl_storage_engine_t *eng, const char *from, const char *to,
                              bool drop_target, uint64_t *ts, shl_status_t *st)
{
    ddl_req_t r = {.kind = DDL_RENAME, .ns = from, .ns2 = to, .flag = drop_target};
    return ddl_run(eng, &r, ts, st);
}

int
shl_catalog_create_index(shl_storage_engine_t *eng, const char *ns, const bson_t *spec,
                         bool *created, uint64_t *ts, shl_status_t *st)
{
    ddl_req_t r = {.kind = DDL_CREATE_INDEX, .ns = ns, .doc = spec, .created = created};
    return ddl_run(eng, &r, ts, st);
}

bool
shl_collection_has_index(const shl_collection_t *c, const bson_t *spec)
{
    bson_t norm;
    bson_iter_t it;
    shl_status_t st = SHL_STATUS_INIT;
    const shl_index_t *same = NULL;
    bool has = false;

    if (normalize_spec(spec, &norm, &st) == 0 && bson_iter_init_find(&it, &norm, "name")) {
        same = shl_collection_find_index(c, bson_iter_utf8(&it, NULL));
        has = same != NULL && spec_equivalent(same->spec, &norm);
    }
    bson_destroy(&norm);
    return has;
}

int
shl_catalog_drop_index(shl_storage_engine_t *eng, const char *ns, const char *name, uint64_t *ts,
                       shl_status_t *st)
{
    ddl_req_t r = {.kind = DDL_DROP_INDEX, .ns = ns, .name = name};
    return ddl_run(eng, &r, ts, st);
}

int
shl_catalog_drop_database(shl_storage_engine_t *eng, const char *db, uint64_t *ts, shl_status_t *st)
{
    ddl_req_t r = {.kind = DDL_DROP_DB, .ns = db};
    return ddl_run(eng, &r, ts, st);
}

int
shl_catalog_coll_mod(shl_storage_engine_t *eng, const char *ns, const bson_t *mod, bson_t *info,
                     uint64_t *ts, shl_status_t *st)
{
    ddl_req_t r = {.kind = DDL_COLL_MOD, .ns = ns, .doc = mod, .info = info};
    bson_init(info);
    return ddl_run(eng, &r, ts, st);
}

/* ---------------------------------------------------------------------------------
 * Replay of 'c' entries (recovery)
 * ------------------------------------------------------------------------------ */

static const char *
utf8_field(const bson_t *doc, const char *key)
{
    bson_iter_t it;
    return bson_iter_init_find(&it, doc, key) && BSON_ITER_HOLDS_UTF8(&it)
               ? bson_iter_utf8(&it, NULL)
               : NULL;
}

/* A 'c' entry (or applyOps op) parsed into a DDL request; the strings and documents 'r'
 * points to live in 'p' (replay_parsed_free). r->kind is DDL_NONE for an unknown command. */
typedef struct replay_parsed {
    ddl_req_t r;
    bson_t rest, info;
    char *full;
    uint8_t uuid[16];
    char db[SHL_NS_MAX + 1];
} replay_parsed_t;

static void
replay_parsed_free(replay_parsed_t *p)
{
    bson_free(p->full);
    bson_destroy(&p->rest);
    bson_destroy(&p->info);
}

static int
replay_parse(const bson_t *entry, uint64_t ts, replay_parsed_t *p, shl_status_t *st)
{
    bson_iter_t it;
    bson_t o;
    const uint8_t *data;
    uint32_t len;
    const char *ns = utf8_field(entry, "ns"), *cmd, *arg;
    char *db = p->db;
    uint8_t *uuid = p->uuid;
    bool has_uuid = false;
    ddl_req_t r = {.kind = DDL_NONE, .replay_ts = ts};
    bson_t *rest = &p->rest, *info = &p->info;
    int ret = 0;

    bson_init(&p->rest);
    bson_init(&p->info);
    p->full = NULL;
    if (ns == NULL || !bson_iter_init_find(&it, entry, "o") || !BSON_ITER_HOLDS_DOCUMENT(&it)) {
        SHL_FAIL(st, SHL_CODE_BAD_VALUE, "malformed command oplog entry");
    }
    bson_iter_document(&it, &len, &data);
    bson_init_static(&o, data, len);
    if (bson_iter_init_find(&it, entry, "ui") && BSON_ITER_HOLDS_BINARY(&it)) {
        bson_subtype_t sub;
        bson_iter_binary(&it, &sub, &len, &data);
        if (len == 16) {
            memcpy(uuid, data, 16);
            has_uuid = true;
        }
    }
    db_of(ns, db, sizeof(p->db));
    if (!bson_iter_init(&it, &o) || !shl_iter_next(&it)) {
        SHL_FAIL(st, SHL_CODE_BAD_VALUE, "empty command oplog entry");
    }
    cmd = shl_iter_key(&it);
    arg = BSON_ITER_HOLDS_UTF8(&it) ? bson_iter_utf8(&it, NULL) : NULL;
    if (arg != NULL) {
        p->full = bson_strdup_printf("%s.%s", db, arg);
    }
    /* The rest of 'o' after the command name: options / index spec. */
    while (shl_iter_next(&it)) {
        bson_append_iter(rest, shl_iter_key(&it), -1, &it);
    }
    if (strcmp(cmd, "create") == 0 && p->full != NULL) {
        r.kind = DDL_CREATE;
        r.ns = p->full;
        r.doc = rest;
        r.uuid = has_uuid ? uuid : NULL;
    } else if (strcmp(cmd, "drop") == 0 && p->full != NULL) {
        r.kind = DDL_DROP;
        r.ns = p->full;
    } else if (strcmp(cmd, "createIndexes") == 0 && p->full != NULL) {
        r.kind = DDL_CREATE_INDEX;
        r.ns = p->full;
        r.doc = rest;
    } else if (strcmp(cmd, "dropIndexes") == 0 && p->full != NULL) {
        r.kind = DDL_DROP_INDEX;
        r.ns = p->full;
        r.name = utf8_field(rest, "index");
        if (r.name == NULL) {
            SHL_FAIL(st, SHL_CODE_BAD_VALUE, "dropIndexes entry without index name");
        }
    } else if (strcmp(cmd, "renameCollection") == 0 && arg != NULL) {
        r.kind = DDL_RENAME;
        r.ns = arg;
        r.ns2 = utf8_field(rest, "to");
        r.flag = bson_iter_init_find(&it, rest, "dropTarget");
        if (r.ns2 == NULL) {
            SHL_FAIL(st, SHL_CODE_BAD_VALUE, "renameCollection entry without 'to'");
        }
    } else if (strcmp(cmd, "dropDatabase") == 0) {
        r.kind = DDL_DROP_DB;
        r.ns = db;
    } else if (strcmp(cmd, "collMod") == 0 && p->full != NULL) {
        r.kind = DDL_COLL_MOD;
        r.ns = p->full;
        r.doc = rest;
        r.info = info;
    } else {
        SHL_LOG_WARNING(RECOVERY, 5100201, "skipping unknown command oplog entry", "cmd",
                        BCON_UTF8(cmd));
    }
done:
    p->r = r;
    return ret;
}

int
shl_catalog_replay_command(shl_storage_engine_t *eng, const bson_t *entry, uint64_t ts,
                           shl_status_t *st)
{
    replay_parsed_t p;
    int ret = replay_parse(entry, ts, &p, st);

    if (ret == 0 && p.r.kind != DDL_NONE) {
        ret = ddl_run(eng, &p.r, NULL, st);
    }
    replay_parsed_free(&p);
    return ret;
}

int
shl_catalog_apply_txn_command(shl_storage_txn_t *txn, const bson_t *op, shl_status_t *st)
{
    replay_parsed_t p;
    int ret = replay_parse(op, txn->fixed_ts, &p, st);

    if (ret == 0 && p.r.kind != DDL_CREATE && p.r.kind != DDL_CREATE_INDEX) {
        ret = shl_status_set(st, SHL_CODE_BAD_VALUE,
                             "only create and createIndexes can be inside a transaction");
    }
    if (ret == 0) {
        ret = ddl_body(txn, &p.r, st);
    }
    replay_parsed_free(&p);
    return ret;
}
