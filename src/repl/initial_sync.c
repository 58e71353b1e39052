/*
 * initial_sync.c -- a member with none of the set's data (new, or wiped) copies it from its
 * sync source: a no-op written there (appendOplogNote) marks where fetching will start, B;
 * every database but local is dropped here and cloned at B (collections with their UUIDs and
 * options, indexes, documents); the fetcher then applies the source's oplog from B, and the
 * member stays STARTUP2 until it has applied the source's newest entry as of the end of the
 * clone. docs/design/replication.md "Initial sync".
 */
#include <string.h>
#include <time.h>

#include "base/clock.h"
#include "base/log.h"
#include "bson/bson_iter.h"
#include "bson/bson_util.h"
#include "db/repl_hooks.h"
#include "repl/repl_private.h"
#include "storage/catalog.h"
#include "storage/oplog.h"

/* Documents inserted per transaction. */
#define CLONE_BATCH 500
/* Tries at a start point above this member's own stable timestamp. */
#define BEGIN_TRIES 20

/* Apply a command entry {op: 'c', ns: "<db>.$cmd", ui, o: 'o'} at 'ts'. */
static int
apply_command(repl_coord_t *rc, const char *db, const uint8_t *uuid, const bson_t *o, uint64_t ts,
              shl_status_t *st)
{
    bson_t entry;
    char ns[256];
    int ret;

    snprintf(ns, sizeof(ns), "%s.$cmd", db);
    shl_oplog_entry_build(&entry, 'c', ns, uuid, o, NULL, ts, rc->term, shl_clock_wall_ms(), NULL);
    ret = shl_oplog_apply(rc->eng, &entry, st);
    bson_destroy(&entry);
    return ret;
}

/* Write a no-op on the source and read its newest entry: the start point, B. Pins this
 * member's stable timestamp below it (the clone and every later entry are written above). */
static int
choose_begin(repl_coord_t *rc, const char *host, uint64_t *begin, shl_status_t *st)
{
    int ret = 0;

    *begin = 0;
    for (int i = 0; i < BEGIN_TRIES && *begin == 0; i++) {
        bson_t cmd = BSON_INITIALIZER, data, reply;
        uint64_t top = 0;
        BSON_APPEND_INT32(&cmd, "appendOplogNote", 1);
        BSON_APPEND_DOCUMENT_BEGIN(&cmd, "data", &data);
        BSON_APPEND_UTF8(&data, "msg", "initial sync");
        bson_append_document_end(&cmd, &data);
        ret = shl_client_run(rc->pool, host, "admin", &cmd, REPL_SOURCE_TIMEOUT_MS, &reply, st);
        bson_destroy(&cmd);
        bson_destroy(&reply);
        SHL_ERR(ret);
        SHL_ERR(repl_source_top(rc, host, &top, st));
        repl_coord_pin_applied(rc, top > 0 ? top - 1 : 0);
        if (top > shl_storage_stable_ts(rc->eng) && top > shl_storage_oldest_ts(rc->eng)) {
            *begin = top;
        } else {
            /* Our own writes are newer than the source's clock: wait for it to move on. */
            struct timespec ts = {0, 250 * 1000000L};
            nanosleep(&ts, NULL);
        }
    }
    if (*begin == 0) {
        SHL_FAIL(st, SHL_CODE_INITIAL_SYNC_FAILURE,
                 "the sync source's oplog is behind this member's stable timestamp");
    }
done:
    return ret;
}

/* Drop every database of this member but local (its own): the clone brings the set's. */
static int
drop_databases(repl_coord_t *rc, uint64_t ts, shl_status_t *st)
{
    char **names = NULL;
    int ret = 0;

    shl_catalog_list_databases(rc->eng, &names);
    for (size_t i = 0; names != NULL && names[i] != NULL; i++) {
        bson_t o = BSON_INITIALIZER;
        if (strcmp(names[i], "local") != 0) {
            BSON_APPEND_INT32(&o, "dropDatabase", 1);
            ret = apply_command(rc, names[i], NULL, &o, ts, st);
        }
        bson_destroy(&o);
        SHL_ERR(ret);
    }
done:
    bson_strfreev(names);
    return ret;
}

/* Remove this member's own entries (everything but local.*) from its oplog: they describe
 * the data just dropped, and one written in the same second as the set's entries (a
 * member's start-up writes, config.system.sessions) would otherwise pass for the newest
 * of the set's entries here and make the fetcher ask the source for an entry it never had
 * (OplogStartMissing). From now on every non-local entry here is the set's. */
static int
forget_own_entries(repl_coord_t *rc, shl_status_t *st)
{
    int64_t removed = 0;
    int ret = 0;

    SHL_ERR(shl_oplog_truncate_after(rc->eng, 0, &removed, st));
    SHL_LOG_INFO(REPL, 2180043, "initial sync removed this member's own oplog entries",
                 "entries", BCON_INT64(removed));
done:
    return ret;
}

/* Copies of the documents a listing returns. */
typedef struct doc_list {
    bson_t **v;
    size_t n, cap;
} doc_list_t;

static void
keep_copy(const bson_t *doc, void *arg)
{
    doc_list_t *l = arg;

    if (l->n == l->cap) {
        l->cap = l->cap ? l->cap * 2 : 16;
        l->v = bson_realloc(l->v, l->cap * sizeof(*l->v));
    }
    l->v[l->n++] = bson_copy(doc);
}

static void
doc_list_cleanup(doc_list_t *l)
{
    for (size_t i = 0; i < l->n; i++) {
        bson_destroy(l->v[i]);
    }
    bson_free(l->v);
    memset(l, 0, sizeof(*l));
}

/* The documents of one collection, inserted CLONE_BATCH to a transaction at B. */
typedef struct cloner {
    repl_coord_t *rc;
    char ns[256];
    uint8_t uuid[16];
    uint64_t ts;
    bson_t ops; /* an applyOps array of 'i' ops */
    int n;
    int64_t total;
    int ret;
    shl_status_t st;
} cloner_t;

static int
insert_ops(shl_storage_txn_t *txn, void *arg, shl_status_t *st)
{
    return shl_oplog_apply_inner_ops(txn, arg, st);
}

static void
flush(cloner_t *c)
{
    if (c->n > 0 && c->ret == 0) {
        c->ret = shl_storage_write_replayed(c->rc->eng, c->ts, insert_ops, &c->ops, &c->st);
    }
    bson_reinit(&c->ops);
    c->n = 0;
}

static void
clone_doc(const bson_t *doc, void *arg)
{
    cloner_t *c = arg;
    bson_t op;
    char key[16];

    snprintf(key, sizeof(key), "%d", c->n++);
    BSON_APPEND_DOCUMENT_BEGIN(&c->ops, key, &op);
    BSON_APPEND_UTF8(&op, "op", "i");
    BSON_APPEND_UTF8(&op, "ns", c->ns);
    shl_bson_append_uuid(&op, "ui", c->uuid);
    BSON_APPEND_DOCUMENT(&op, "o", doc);
    bson_append_document_end(&c->ops, &op);
    c->total++;
    if (c->n >= CLONE_BATCH) {
        flush(c);
    }
}

/* One collection of 'db' as listCollections describes it: created with the source's UUID and
 * options, its indexes, then its documents. */
static int
clone_collection(repl_coord_t *rc, const char *host, const char *db, const bson_t *info,
                 uint64_t ts, int64_t *docs, shl_status_t *st)
{
    bson_iter_t it;
    bson_t options, sub, create = BSON_INITIALIZER, cmd = BSON_INITIALIZER;
    doc_list_t indexes = {0};
    cloner_t c;
    const char *name = NULL;
    int ret = 0;

    memset(&c, 0, sizeof(c));
    bson_init(&c.ops);
    if (bson_iter_init_find(&it, info, "type") && BSON_ITER_HOLDS_UTF8(&it) &&
        strcmp(bson_iter_utf8(&it, NULL), "collection") != 0) {
        goto done; /* views live in system.views, cloned as a collection */
    }
    if (!bson_iter_init_find(&it, info, "name") || !BSON_ITER_HOLDS_UTF8(&it) ||
        !shl_bson_get_subdoc(info, "info", &sub) || !bson_iter_init_find(&it, &sub, "uuid") ||
        !shl_bson_iter_uuid(&it, c.uuid)) {
        SHL_FAIL(st, SHL_CODE_INITIAL_SYNC_FAILURE, "listCollections entry without name or uuid");
    }
    bson_iter_init_find(&it, info, "name");
    name = bson_iter_utf8(&it, NULL);
    BSON_APPEND_UTF8(&create, "create", name);
    if (shl_bson_get_subdoc(info, "options", &options)) {
        bson_concat(&create, &options);
    }
    SHL_ERR(apply_command(rc, db, c.uuid, &create, ts, st));
    BSON_APPEND_UTF8(&cmd, "listIndexes", name);
    SHL_ERR(repl_source_find(rc, host, db, &cmd, keep_copy, &indexes, st));
    for (size_t i = 0; i < indexes.n; i++) {
        bson_t ci = BSON_INITIALIZER;
        if (!bson_iter_init_find(&it, indexes.v[i], "name") || !BSON_ITER_HOLDS_UTF8(&it) ||
            strcmp(bson_iter_utf8(&it, NULL), "_id_") != 0) {
            BSON_APPEND_UTF8(&ci, "createIndexes", name);
            bson_concat(&ci, indexes.v[i]);
            ret = apply_command(rc, db, c.uuid, &ci, ts, st);
        }
        bson_destroy(&ci);
        SHL_ERR(ret);
    }
    c.rc = rc;
    c.ts = ts;
    snprintf(c.ns, sizeof(c.ns), "%s.%s", db, name);
    bson_reinit(&cmd);
    BSON_APPEND_UTF8(&cmd, "find", name);
    BSON_APPEND_INT32(&cmd, "batchSize", 1000);
    SHL_ERR(repl_source_find(rc, host, db, &cmd, clone_doc, &c, st));
    flush(&c);
    if (c.ret != 0) {
        *st = c.st;
        SHL_ERR(c.ret);
    }
    *docs += c.total;
done:
    bson_destroy(&create);
    bson_destroy(&cmd);
    bson_destroy(&c.ops);
    doc_list_cleanup(&indexes);
    return ret;
}

/* The source's database names (listDatabases answers no cursor). */
static int
source_databases(repl_coord_t *rc, const char *host, doc_list_t *out, shl_status_t *st)
{
    bson_t cmd = BSON_INITIALIZER, reply;
    bson_iter_t it, sub;
    int ret = 0;

    BSON_APPEND_INT32(&cmd, "listDatabases", 1);
    BSON_APPEND_BOOL(&cmd, "nameOnly", true);
    SHL_ERR(shl_client_run(rc->pool, host, "admin", &cmd, REPL_SOURCE_TIMEOUT_MS, &reply, st));
    if (bson_iter_init_find(&it, &reply, "databases") && BSON_ITER_HOLDS_ARRAY(&it) &&
        bson_iter_recurse(&it, &sub)) {
        while (bson_iter_next(&sub)) {
            const uint8_t *data;
            uint32_t len;
            bson_t d;
            if (BSON_ITER_HOLDS_DOCUMENT(&sub)) {
                bson_iter_document(&sub, &len, &data);
                if (bson_init_static(&d, data, len)) {
                    keep_copy(&d, out);
                }
            }
        }
    }
done:
    bson_destroy(&cmd);
    bson_destroy(&reply);
    return ret;
}

int
repl_initial_sync(repl_coord_t *rc, const char *host, uint64_t *begin, uint64_t *min_valid,
                  shl_status_t *st)
{
    doc_list_t dbs = {0}, colls = {0};
    int64_t docs = 0, started = shl_clock_mono_us();
    int ret = 0;

    *begin = 0;
    *min_valid = 0;
    SHL_LOG_INFO(REPL, 2180040, "initial sync starting", "source", BCON_UTF8(host));
    /* Prepared transactions (recovered at start-up by a member whose earlier initial sync did
     * not finish, as far as it knows) go first: the databases they hold are dropped, and
     * the decisions for them are before the start point, so none would come. */
    (void)shl_db_repl_rollback_prepared(rc->svc, 0);
    SHL_ERR(choose_begin(rc, host, begin, st));
    SHL_ERR(drop_databases(rc, *begin, st));
    SHL_ERR(forget_own_entries(rc, st));
    SHL_ERR(source_databases(rc, host, &dbs, st));
    for (size_t i = 0; i < dbs.n; i++) {
        bson_iter_t it;
        bson_t cmd = BSON_INITIALIZER;
        const char *db;
        if (!bson_iter_init_find(&it, dbs.v[i], "name") || !BSON_ITER_HOLDS_UTF8(&it)) {
            continue;
        }
        db = bson_iter_utf8(&it, NULL);
        if (strcmp(db, "local") == 0) {
            continue;
        }
        doc_list_cleanup(&colls);
        BSON_APPEND_INT32(&cmd, "listCollections", 1);
        ret = repl_source_find(rc, host, db, &cmd, keep_copy, &colls, st);
        bson_destroy(&cmd);
        SHL_ERR(ret);
        for (size_t j = 0; j < colls.n; j++) {
            SHL_ERR(clone_collection(rc, host, db, colls.v[j], *begin, &docs, st));
        }
    }
    SHL_ERR(repl_source_top(rc, host, min_valid, st));
    SHL_LOG_INFO(REPL, 2180041, "initial sync cloned the databases", "source", BCON_UTF8(host),
                 "documents", BCON_INT64(docs), "durationMillis",
                 BCON_INT64((shl_clock_mono_us() - started) / 1000), "beginFetching",
                 BCON_TIMESTAMP(SHL_TS_SECS(*begin), SHL_TS_INC(*begin)), "minValid",
                 BCON_TIMESTAMP(SHL_TS_SECS(*min_valid), SHL_TS_INC(*min_valid)));
done:
    doc_list_cleanup(&dbs);
    doc_list_cleanup(&colls);
    return ret;
}
