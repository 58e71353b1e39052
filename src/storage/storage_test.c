/*
 * storage_test.c -- unit tests for the storage engine: clock, catalog, record stores,
 * indexes, oplog content and visibility, write conflicts, durability, recovery, and a
 * crash loop (a child process writes until SIGKILL; the parent reopens and checks).
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/log.h"
#include "base/options.h"
#include "base/unit_test.h"
#include "bson/bson_util.h"
#include "storage/catalog.h"
#include "storage/index.h"
#include "storage/local_doc.h"
#include "storage/oplog.h"
#include "storage/record_store.h"
#include "storage/storage.h"
#include "storage/storage_private.h"
#include "storage/write.h"

/* ---------------------------------------------------------------------------------
 * Helpers
 * ------------------------------------------------------------------------------ */

/* Engine log lines go to a file unless SHL_TEST_LOG=stderr. */
__attribute__((constructor)) static void
quiet_logs(void)
{
    const char *where = getenv("SHL_TEST_LOG");
    shl_options_init();
    if (where == NULL || strcmp(where, "stderr") != 0) {
        shl_log_open("/tmp/shl_storage_test.log");
    }
}

static char *
tmpdir(void)
{
    char tmpl[] = "/tmp/shl_storage_test_XXXXXX";
    char *d = mkdtemp(tmpl);
    return d != NULL ? bson_strdup(d) : NULL;
}

static void
rmrf(const char *dir)
{
    char *cmd = bson_strdup_printf("rm -rf '%s'", dir);
    if (system(cmd) != 0) {
        fprintf(stderr, "cannot remove %s\n", dir);
    }
    bson_free(cmd);
}

static shl_storage_engine_t *
open_eng(const char *dir, bool threads)
{
    shl_storage_options_t o = {
        .dbpath = dir, .cache_size_mb = 64, .session_max = 200, .no_background_threads = !threads};
    shl_storage_engine_t *eng = NULL;
    shl_status_t st;
    if (shl_storage_open(&o, &eng, &st) != 0) {
        fprintf(stderr, "open failed: %s\n", st.reason);
        return NULL;
    }
    return eng;
}

/* Temporary documents for call arguments, freed by tmp_free() at the end of a test. */
static bson_t *tmp_docs[256];
static int ntmp;

static bson_t *
T(const char *json)
{
    bson_t *b = shl_test_bson(json);
    if (ntmp < 256) {
        tmp_docs[ntmp++] = b;
    }
    return b;
}

static void
tmp_free(void)
{
    while (ntmp > 0) {
        bson_destroy(tmp_docs[--ntmp]);
    }
}

/* Compare a scan of 'ns' with the expected JSON array text. */
#define ASSERT_SCAN(eng, ns, forward, want)                                                        \
    do {                                                                                           \
        char *got_scan_ = scan_json((eng), (ns), (forward));                                       \
        bool same_ = strcmp(got_scan_, (want)) == 0;                                               \
        if (!same_) {                                                                              \
            shl_test_fail_here(__FILE__, __LINE__, "scan %s:\n  got:  %s\n  want: %s", (ns),       \
                               got_scan_, (want));                                                 \
        }                                                                                          \
        bson_free(got_scan_);                                                                      \
        if (!same_) {                                                                              \
            return;                                                                                \
        }                                                                                          \
    } while (0)

typedef struct ins_arg {
    shl_collection_t *coll;
    const bson_t *doc;
    int64_t rid;
} ins_arg_t;

static int
ins_fn(shl_storage_txn_t *txn, void *arg, shl_status_t *st)
{
    ins_arg_t *a = arg;
    return shl_doc_insert(txn, a->coll, a->doc, NULL, &a->rid, st);
}

/* Insert one document (JSON) in its own write unit. */
static int
insert_json(shl_storage_engine_t *eng, const char *ns, const char *json, shl_status_t *st)
{
    shl_coll_handle_t h;
    bson_t *doc = shl_test_bson(json);
    ins_arg_t a = {0};
    int ret = shl_storage_coll_acquire(eng, ns, SHL_LOCK_SHARED, &h, st);
    if (ret == 0 && h.coll == NULL) {
        ret = shl_status_set(st, SHL_CODE_NAMESPACE_NOT_FOUND, "no %s", ns);
    }
    if (ret == 0) {
        a.coll = h.coll;
        a.doc = doc;
        ret = shl_storage_write_retry(eng, ins_fn, &a, NULL, st);
    }
    shl_storage_coll_release(&h);
    bson_destroy(doc);
    return ret;
}

/* Read all documents of 'ns' into a JSON array string (caller frees). */
static char *
scan_json(shl_storage_engine_t *eng, const char *ns, bool forward)
{
    shl_storage_txn_t *txn;
    shl_record_cursor_t *rc;
    shl_status_t st;
    shl_collection_t *c = shl_catalog_get(eng, ns);
    bson_string_t *s = bson_string_new("[");
    bool first = true;

    if (c == NULL || shl_storage_txn_begin(eng, NULL, &txn, &st) != 0) {
        shl_collection_release(c);
        return bson_string_free(s, false);
    }
    shl_record_cursor_open(txn, c, forward, &rc, &st);
    for (;;) {
        int64_t rid;
        bson_t doc;
        bool eof;
        char *j;
        if (shl_record_cursor_next(rc, &rid, &doc, &eof, &st) != 0 || eof) {
            break;
        }
        j = bson_as_relaxed_extended_json(&doc, NULL);
        bson_string_append_printf(s, "%s%s", first ? "" : ", ", j);
        bson_free(j);
        first = false;
    }
    shl_record_cursor_close(rc);
    shl_storage_txn_abort(txn);
    shl_collection_release(c);
    bson_string_append(s, "]");
    return bson_string_free(s, false);
}

/* All oplog entries (ts > after) as an array of copies; returns count. */
static size_t
read_oplog(shl_storage_engine_t *eng, uint64_t after, bson_t **out)
{
    shl_storage_txn_t *txn;
    shl_record_cursor_t *rc;
    shl_status_t st;
    size_t n = 0, cap = 16;
    bson_t **list = bson_malloc0(cap * sizeof(bson_t *));
    bson_t *arr;

    shl_storage_txn_begin(eng, NULL, &txn, &st);
    shl_oplog_cursor_open(txn, after, &rc, &st);
    for (;;) {
        int64_t rid;
        bson_t doc;
        bool eof;
        if (shl_record_cursor_next(rc, &rid, &doc, &eof, &st) != 0 || eof) {
            break;
        }
        if (n == cap) {
            cap *= 2;
            list = bson_realloc(list, cap * sizeof(bson_t *));
        }
        list[n++] = bson_copy(&doc);
    }
    shl_record_cursor_close(rc);
    shl_storage_txn_abort(txn);
    /* bson_t cannot be moved once allocated: copy into the final array in place. */
    arr = bson_malloc0((n + 1) * sizeof(bson_t));
    for (size_t i = 0; i < n; i++) {
        bson_copy_to(list[i], &arr[i]);
        bson_destroy(list[i]);
    }
    bson_free(list);
    *out = arr;
    return n;
}

static void
free_docs(bson_t *list, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        bson_destroy(&list[i]);
    }
    bson_free(list);
}

/* The entry without ts/wall/ui (they vary), for ASSERT_BSON_EQ. */
static void
strip_entry(const bson_t *e, bson_t *out)
{
    bson_iter_t it;
    bson_init(out);
    bson_iter_init(&it, e);
    while (bson_iter_next(&it)) {
        const char *k = bson_iter_key(&it);
        if (strcmp(k, "ts") != 0 && strcmp(k, "wall") != 0 && strcmp(k, "ui") != 0) {
            bson_append_iter(out, k, -1, &it);
        }
    }
}

static uint64_t
entry_ts(const bson_t *e)
{
    bson_iter_t it;
    uint32_t s = 0, i = 0;
    if (bson_iter_init_find(&it, e, "ts")) {
        bson_iter_timestamp(&it, &s, &i);
    }
    return SHL_TS_MAKE(s, i);
}

/* ---------------------------------------------------------------------------------
 * Engine, lock file, clock
 * ------------------------------------------------------------------------------ */

SHL_TEST(engine_open_close_and_dbpath_lock)
{
    char *dir = tmpdir();
    shl_storage_options_t o = {.dbpath = dir, .cache_size_mb = 64, .no_background_threads = true};
    shl_storage_engine_t *eng = open_eng(dir, false), *second = NULL;
    shl_status_t st;

    ASSERT(eng != NULL);
    ASSERT_INT_EQ(shl_storage_open(&o, &second, &st), SHL_CODE_DB_PATH_IN_USE);
    ASSERT(strstr(st.reason, "Unable to lock the lock file") != NULL);
    ASSERT(second == NULL);
    shl_storage_close(eng);
    eng = open_eng(dir, false);
    ASSERT(eng != NULL);
    shl_storage_close(eng);
    rmrf(dir);
    bson_free(dir);
    tmp_free();
}

SHL_TEST(clock_is_monotonic_and_survives_restart)
{
    char *dir = tmpdir();
    shl_storage_engine_t *eng = open_eng(dir, false);
    shl_status_t st;
    uint64_t last, top = 0;
    int64_t now = shl_clock_wall_ms();

    ASSERT(eng != NULL);
    ASSERT_INT_EQ(shl_catalog_create_collection(eng, "t.c", NULL, NULL, &last, &st), 0);
    ASSERT(SHL_TS_SECS(last) >= (uint32_t)(now / 1000));
    /* The wall clock jumps back an hour: timestamps keep increasing. */
    shl_clock_set_fake_wall_ms(now - 3600 * 1000);
    for (int i = 0; i < 5; i++) {
        char json[64];
        snprintf(json, sizeof(json), "{'_id': %d}", i);
        ASSERT_INT_EQ(insert_json(eng, "t.c", json, &st), 0);
        ASSERT(shl_storage_clock_now(eng) > last);
        last = shl_storage_clock_now(eng);
    }
    ASSERT_INT_EQ(shl_oplog_top(eng, &top, &st), 0);
    ASSERT_INT_EQ(top, last);
    shl_storage_close(eng);
    /* After a restart (wall clock still behind) the clock starts above the oplog top. */
    eng = open_eng(dir, false);
    ASSERT(eng != NULL);
    ASSERT_INT_EQ(insert_json(eng, "t.c", "{'_id': 100}", &st), 0);
    ASSERT(shl_storage_clock_now(eng) > top);
    shl_clock_set_fake_wall_ms(0);
    shl_storage_clock_advance(eng, SHL_TS_MAKE(now / 1000 + 1000, 7));
    ASSERT_INT_EQ(insert_json(eng, "t.c", "{'_id': 101}", &st), 0);
    ASSERT_INT_EQ(shl_storage_clock_now(eng), SHL_TS_MAKE(now / 1000 + 1000, 8));
    shl_storage_close(eng);
    rmrf(dir);
    bson_free(dir);
    tmp_free();
}

/* ---------------------------------------------------------------------------------
 * Catalog
 * ------------------------------------------------------------------------------ */

SHL_TEST(catalog_create_drop_rename_list)
{
    char *dir = tmpdir();
    shl_storage_engine_t *eng = open_eng(dir, false);
    shl_status_t st;
    shl_collection_t **list, *c;
    size_t n;
    char **dbs;
    bson_t *opts = shl_test_bson("{'validator': {'a': 1}}");
    uint8_t uuid[16];

    ASSERT(eng != NULL);
    ASSERT_INT_EQ(shl_catalog_create_collection(eng, "db1.a", opts, NULL, NULL, &st), 0);
    ASSERT_INT_EQ(shl_catalog_create_collection(eng, "db1.b", NULL, NULL, NULL, &st), 0);
    ASSERT_INT_EQ(shl_catalog_create_collection(eng, "db2.x", NULL, NULL, NULL, &st), 0);
    ASSERT_INT_EQ(shl_catalog_create_collection(eng, "db1.a", NULL, NULL, NULL, &st),
                  SHL_CODE_NAMESPACE_EXISTS);
    ASSERT_STR_EQ(st.reason, "Collection db1.a already exists.");
    ASSERT_INT_EQ(shl_catalog_create_collection(eng, "bad$db.a", NULL, NULL, NULL, &st),
                  SHL_CODE_INVALID_NAMESPACE);
    ASSERT_INT_EQ(
        shl_catalog_create_collection(eng, "db1.c", T("{'capped': true}"), NULL, NULL, &st),
        SHL_CODE_INVALID_OPTIONS);
    ASSERT_INT_EQ(shl_catalog_create_collection(eng, "local.oplog.rs", NULL, NULL, NULL, &st),
                  SHL_CODE_ILLEGAL_OPERATION);

    shl_catalog_list(eng, "db1", &list, &n);
    ASSERT_INT_EQ(n, 2);
    ASSERT_STR_EQ(list[0]->ns, "db1.a");
    ASSERT_STR_EQ(list[1]->ns, "db1.b");
    ASSERT_BSON_EQ(list[0]->options, "{'validator': {'a': 1}}");
    ASSERT_INT_EQ(list[0]->nindexes, 1);
    ASSERT_STR_EQ(list[0]->indexes[0]->name, "_id_");
    ASSERT_BSON_EQ(list[0]->indexes[0]->spec, "{'v': 2, 'key': {'_id': 1}, 'name': '_id_'}");
    ASSERT((list[0]->uuid[6] & 0xf0) == 0x40);
    memcpy(uuid, list[0]->uuid, 16);
    shl_catalog_list_free(list, n);

    shl_catalog_list_databases(eng, &dbs);
    ASSERT_STR_EQ(dbs[0], "db1");
    ASSERT_STR_EQ(dbs[1], "db2");
    ASSERT_STR_EQ(dbs[2], "local");
    ASSERT(dbs[3] == NULL);
    bson_strfreev(dbs);

    /* rename keeps the UUID; a target that exists needs dropTarget */
    ASSERT_INT_EQ(shl_catalog_rename_collection(eng, "db1.a", "db1.b", false, NULL, &st),
                  SHL_CODE_NAMESPACE_EXISTS);
    ASSERT_INT_EQ(shl_catalog_rename_collection(eng, "db1.a", "db2.a", false, NULL, &st),
                  SHL_CODE_ILLEGAL_OPERATION);
    ASSERT_INT_EQ(shl_catalog_rename_collection(eng, "db1.nope", "db1.z", false, NULL, &st),
                  SHL_CODE_NAMESPACE_NOT_FOUND);
    ASSERT_INT_EQ(insert_json(eng, "db1.a", "{'_id': 1, 'v': 'kept'}", &st), 0);
    ASSERT_INT_EQ(shl_catalog_rename_collection(eng, "db1.a", "db1.b", true, NULL, &st), 0);
    ASSERT(shl_catalog_get(eng, "db1.a") == NULL);
    c = shl_catalog_get(eng, "db1.b");
    ASSERT(c != NULL && memcmp(c->uuid, uuid, 16) == 0);
    ASSERT_INT_EQ(shl_collection_num_records(c), 1);
    shl_collection_release(c);
    c = shl_catalog_get_by_uuid(eng, uuid);
    ASSERT(c != NULL && strcmp(c->ns, "db1.b") == 0);
    shl_collection_release(c);

    ASSERT_INT_EQ(shl_catalog_drop_collection(eng, "db1.zz", NULL, &st),
                  SHL_CODE_NAMESPACE_NOT_FOUND);
    ASSERT_STR_EQ(st.reason, "ns not found");
    ASSERT_INT_EQ(shl_catalog_drop_collection(eng, "db2.x", NULL, &st), 0);
    ASSERT(shl_catalog_get(eng, "db2.x") == NULL);

    /* After a clean restart the catalog is the same. */
    shl_storage_close(eng);
    eng = open_eng(dir, false);
    ASSERT(eng != NULL);
    ASSERT_SCAN(eng, "db1.b", true, "[{ \"_id\" : 1, \"v\" : \"kept\" }]");
    shl_catalog_list(eng, NULL, &list, &n);
    ASSERT_INT_EQ(n, 2);
    ASSERT_STR_EQ(list[0]->ns, "db1.b");
    ASSERT_STR_EQ(list[1]->ns, "local.oplog.rs");
    ASSERT(memcmp(list[0]->uuid, uuid, 16) == 0);
    shl_catalog_list_free(list, n);

    ASSERT_INT_EQ(shl_catalog_drop_database(eng, "db1", NULL, &st), 0);
    ASSERT(shl_catalog_get(eng, "db1.b") == NULL);
    ASSERT_INT_EQ(shl_catalog_drop_database(eng, "local", NULL, &st), SHL_CODE_ILLEGAL_OPERATION);
    shl_storage_close(eng);
    bson_destroy(opts);
    rmrf(dir);
    bson_free(dir);
    tmp_free();
}

SHL_TEST(ddl_excludes_crud_on_that_collection_only)
{
    char *dir = tmpdir();
    shl_storage_engine_t *eng = open_eng(dir, false);
    shl_coll_handle_t h1, h2;
    shl_status_t st;

    ASSERT(eng != NULL);
    ASSERT_INT_EQ(shl_catalog_create_collection(eng, "d.a", NULL, NULL, NULL, &st), 0);
    ASSERT_INT_EQ(shl_catalog_create_collection(eng, "d.b", NULL, NULL, NULL, &st), 0);
    /* Exclusive on d.a does not block shared on d.b. */
    ASSERT_INT_EQ(shl_storage_coll_acquire(eng, "d.a", SHL_LOCK_EXCLUSIVE, &h1, &st), 0);
    ASSERT_INT_EQ(shl_storage_coll_acquire(eng, "d.b", SHL_LOCK_SHARED, &h2, &st), 0);
    ASSERT(h2.coll != NULL);
    shl_storage_coll_release(&h2);
    /* ...but does block d.a for another thread (trylock view of the rwlock). */
    ASSERT(pthread_rwlock_tryrdlock(&((shl_named_lock_t *)h1.coll_lock_)->rw) == EBUSY);
    shl_storage_coll_release(&h1);
    ASSERT_INT_EQ(shl_storage_coll_acquire(eng, "nodot", SHL_LOCK_SHARED, &h1, &st),
                  SHL_CODE_INVALID_NAMESPACE);
    shl_storage_close(eng);
    rmrf(dir);
    bson_free(dir);
    tmp_free();
}

/* ---------------------------------------------------------------------------------
 * Records
 * ------------------------------------------------------------------------------ */

typedef struct crud_arg {
    shl_collection_t *coll;
    int step;
    int64_t rids[3];
} crud_arg_t;

SHL_TEST(record_store_insert_update_delete_scan)
{
    char *dir = tmpdir();
    shl_storage_engine_t *eng = open_eng(dir, false);
    shl_storage_txn_t *txn;
    shl_status_t st;
    shl_collection_t *c;
    bson_t *d1 = shl_test_bson("{'_id': 1, 'x': 'a'}"), *d2 = shl_test_bson("{'_id': 2, 'x': 'b'}");
    bson_t *d3 = shl_test_bson("{'_id': 3, 'x': 'c'}"),
           *d2b = shl_test_bson("{'_id': 2, 'x': 'bbbb'}");
    bson_t got;
    bool found;
    int64_t r1, r2, r3;
    bson_value_t id2 = {.value_type = BSON_TYPE_INT32, .value.v_int32 = 2};

    ASSERT(eng != NULL);
    ASSERT_INT_EQ(shl_catalog_create_collection(eng, "r.c", NULL, NULL, NULL, &st), 0);
    c = shl_catalog_get(eng, "r.c");
    ASSERT_INT_EQ(shl_storage_txn_begin(eng, NULL, &txn, &st), 0);
    ASSERT_INT_EQ(shl_doc_insert(txn, c, d1, NULL, &r1, &st), 0);
    ASSERT_INT_EQ(shl_doc_insert(txn, c, d2, NULL, &r2, &st), 0);
    ASSERT_INT_EQ(shl_doc_insert(txn, c, d3, NULL, &r3, &st), 0);
    ASSERT(r1 < r2 && r2 < r3);
    /* Own writes are visible inside the write unit, not outside until commit. */
    ASSERT_INT_EQ(shl_record_get(txn, c, r2, &got, &found, &st), 0);
    ASSERT(found);
    ASSERT_BSON_EQ(&got, "{'_id': 2, 'x': 'b'}");
    bson_destroy(&got);
    ASSERT_SCAN(eng, "r.c", true, "[]");
    ASSERT_INT_EQ(shl_collection_num_records(c), 0);
    ASSERT_INT_EQ(shl_storage_txn_commit(txn, &st), 0);
    ASSERT_INT_EQ(shl_collection_num_records(c), 3);
    ASSERT_INT_EQ(shl_collection_data_size(c), d1->len + d2->len + d3->len);
    ASSERT_SCAN(eng, "r.c", false,
                "[{ \"_id\" : 3, \"x\" : \"c\" }, { \"_id\" : 2, \"x\" : \"b\" }, "
                "{ \"_id\" : 1, \"x\" : \"a\" }]");

    ASSERT_INT_EQ(shl_storage_txn_begin(eng, NULL, &txn, &st), 0);
    ASSERT_INT_EQ(shl_doc_update(txn, c, r2, NULL, d2b, NULL, &st), 0);
    ASSERT_INT_EQ(shl_doc_delete(txn, c, r1, NULL, NULL, &st), 0);
    ASSERT_INT_EQ(shl_doc_delete(txn, c, r1, NULL, NULL, &st), SHL_CODE_NO_SUCH_KEY);
    ASSERT_INT_EQ(shl_storage_txn_commit(txn, &st), 0);
    ASSERT_SCAN(eng, "r.c", true,
                "[{ \"_id\" : 2, \"x\" : \"bbbb\" }, { \"_id\" : 3, \"x\" : \"c\" }]");
    ASSERT_INT_EQ(shl_collection_num_records(c), 2);
    ASSERT_INT_EQ(shl_collection_data_size(c), d2b->len + d3->len);

    /* find by _id and seek */
    ASSERT_INT_EQ(shl_storage_txn_begin(eng, NULL, &txn, &st), 0);
    ASSERT_INT_EQ(shl_doc_find_by_id(txn, c, &id2, &got, &r1, &found, &st), 0);
    ASSERT(found && r1 == r2);
    ASSERT_BSON_EQ(&got, "{'_id': 2, 'x': 'bbbb'}");
    bson_destroy(&got);
    {
        shl_record_cursor_t *rc;
        int64_t rid;
        bson_t doc;
        bool eof;
        ASSERT_INT_EQ(shl_record_cursor_open(txn, c, true, &rc, &st), 0);
        shl_record_cursor_seek(rc, r3);
        ASSERT_INT_EQ(shl_record_cursor_next(rc, &rid, &doc, &eof, &st), 0);
        ASSERT(!eof && rid == r3);
        ASSERT_INT_EQ(shl_record_cursor_next(rc, &rid, &doc, &eof, &st), 0);
        ASSERT(eof);
        shl_record_cursor_close(rc);
    }
    shl_storage_txn_abort(txn);

    /* RecordIds continue above the largest after a restart. */
    shl_collection_release(c);
    shl_storage_close(eng);
    eng = open_eng(dir, false);
    c = shl_catalog_get(eng, "r.c");
    ASSERT_INT_EQ(shl_collection_num_records(c), 2);
    ASSERT_INT_EQ(shl_storage_txn_begin(eng, NULL, &txn, &st), 0);
    ASSERT_INT_EQ(shl_doc_insert(txn, c, d1, NULL, &r1, &st), 0);
    ASSERT(r1 > r3);
    ASSERT_INT_EQ(shl_storage_txn_commit(txn, &st), 0);
    shl_collection_release(c);
    shl_storage_close(eng);
    bson_destroy(d1);
    bson_destroy(d2);
    bson_destroy(d3);
    bson_destroy(d2b);
    rmrf(dir);
    bson_free(dir);
    tmp_free();
}

/* ---------------------------------------------------------------------------------
 * Indexes
 * ------------------------------------------------------------------------------ */

SHL_TEST(unique_index_duplicate_key_errors)
{
    char *dir = tmpdir();
    shl_storage_engine_t *eng = open_eng(dir, false);
    shl_storage_txn_t *txn;
    shl_status_t st;
    shl_collection_t *c;
    bson_t extra;
    bool created;
    bson_t *dup = shl_test_bson("{'_id': 1, 'a': 'other'}");

    ASSERT(eng != NULL);
    ASSERT_INT_EQ(shl_catalog_create_collection(eng, "db.c", NULL, NULL, NULL, &st), 0);
    ASSERT_INT_EQ(insert_json(eng, "db.c", "{'_id': 1, 'a': 'x', 'b': 1}", &st), 0);
    ASSERT_INT_EQ(insert_json(eng, "db.c", "{'_id': 1, 'a': 'y'}", &st), SHL_CODE_DUPLICATE_KEY);
    ASSERT_STR_EQ(st.reason,
                  "E11000 duplicate key error collection: db.c index: _id_ dup key: { _id: 1 }");
    ASSERT(shl_status_extra_get(&st, &extra));
    ASSERT_BSON_EQ(&extra, "{'keyPattern': {'_id': 1}, 'keyValue': {'_id': 1}}");
    ASSERT_INT_EQ(insert_json(eng, "db.c", "{'_id': 'k', 'a': 'x', 'b': 1}", &st), 0);

    /* Building a unique index over duplicates fails and leaves no index behind. */
    ASSERT_INT_EQ(shl_catalog_create_index(eng, "db.c",
                                           T("{'key': {'a': 1, 'b': -1}, 'name': "
                                             "'a_1_b_-1', 'unique': true}"),
                                           &created, NULL, &st),
                  SHL_CODE_DUPLICATE_KEY);
    ASSERT_STR_EQ(st.reason, "E11000 duplicate key error collection: db.c index: a_1_b_-1 dup "
                             "key: { a: \"x\", b: 1 }");
    c = shl_catalog_get(eng, "db.c");
    ASSERT_INT_EQ(c->nindexes, 1);
    shl_collection_release(c);

    ASSERT_INT_EQ(shl_catalog_create_index(eng, "db.c",
                                           T("{'key': {'b': 1}, 'name': 'b_1', "
                                             "'unique': true, 'sparse': true}"),
                                           &created, NULL, &st),
                  SHL_CODE_DUPLICATE_KEY);
    ASSERT_INT_EQ(shl_catalog_create_index(eng, "db.c",
                                           T("{'key': {'q': 1}, 'name': 'q_1', "
                                             "'unique': true, 'sparse': true}"),
                                           &created, NULL, &st),
                  0);
    ASSERT(created);
    ASSERT_INT_EQ(shl_catalog_create_index(eng, "db.c",
                                           T("{'name': 'q_1', 'key': {'q': 1}, "
                                             "'sparse': true, 'unique': true}"),
                                           &created, NULL, &st),
                  0);
    ASSERT(!created);
    ASSERT_INT_EQ(shl_catalog_create_index(eng, "db.c", T("{'key': {'q': -1}, 'name': 'q_1'}"),
                                           &created, NULL, &st),
                  SHL_CODE_INDEX_KEY_SPECS_CONFLICT);
    ASSERT_INT_EQ(shl_catalog_create_index(eng, "db.c",
                                           T("{'key': {'q': 1}, 'name': 'other', "
                                             "'unique': true, 'sparse': true}"),
                                           &created, NULL, &st),
                  SHL_CODE_INDEX_OPTIONS_CONFLICT);
    ASSERT_INT_EQ(shl_catalog_create_index(eng, "db.c", T("{'key': {'h': 'hashed'}, 'name': 'h'}"),
                                           &created, NULL, &st),
                  SHL_CODE_CANNOT_CREATE_INDEX);
    ASSERT_INT_EQ(insert_json(eng, "db.c", "{'_id': 5, 'q': 7}", &st), 0);
    ASSERT_INT_EQ(insert_json(eng, "db.c", "{'_id': 6, 'q': 7.0}", &st), SHL_CODE_DUPLICATE_KEY);
    ASSERT_STR_EQ(st.reason,
                  "E11000 duplicate key error collection: db.c index: q_1 dup key: { q: 7.0 }");

    /* A duplicate inside a write unit leaves the unit usable and nothing half-done. */
    c = shl_catalog_get(eng, "db.c");
    ASSERT_INT_EQ(c->nindexes, 2);
    ASSERT_INT_EQ(shl_storage_txn_begin(eng, NULL, &txn, &st), 0);
    ASSERT_INT_EQ(shl_doc_insert(txn, c, dup, NULL, NULL, &st), SHL_CODE_DUPLICATE_KEY);
    {
        bson_t *ok = shl_test_bson("{'_id': 9, 'q': 9}");
        ASSERT_INT_EQ(shl_doc_insert(txn, c, ok, NULL, NULL, &st), 0);
        bson_destroy(ok);
    }
    /* Update that would collide on q_1 is refused; the document keeps its old keys. */
    {
        bson_value_t id9 = {.value_type = BSON_TYPE_INT32, .value.v_int32 = 9};
        bson_t cur, *upd = shl_test_bson("{'_id': 9, 'q': 7}");
        int64_t rid;
        bool found;
        ASSERT_INT_EQ(shl_doc_find_by_id(txn, c, &id9, &cur, &rid, &found, &st), 0);
        ASSERT(found);
        ASSERT_INT_EQ(shl_doc_update(txn, c, rid, &cur, upd, NULL, &st), SHL_CODE_DUPLICATE_KEY);
        bson_destroy(&cur);
        bson_destroy(upd);
    }
    ASSERT_INT_EQ(shl_storage_txn_commit(txn, &st), 0);
    ASSERT_INT_EQ(shl_catalog_drop_index(eng, "db.c", "_id_", NULL, &st), SHL_CODE_INVALID_OPTIONS);
    ASSERT_INT_EQ(shl_catalog_drop_index(eng, "db.c", "zz", NULL, &st), SHL_CODE_INDEX_NOT_FOUND);
    ASSERT_STR_EQ(st.reason, "index not found with name [zz]");
    ASSERT_INT_EQ(shl_catalog_drop_index(eng, "db.c", "q_1", NULL, &st), 0);
    ASSERT_INT_EQ(insert_json(eng, "db.c", "{'_id': 6, 'q': 7.0}", &st), 0);
    shl_collection_release(c);
    shl_storage_close(eng);
    bson_destroy(dup);
    rmrf(dir);
    bson_free(dir);
    tmp_free();
}

/* Whether index 'name' of 'ns' is flagged multikey in the current catalog snapshot. */
static bool
is_multikey(shl_storage_engine_t *eng, const char *ns, const char *name)
{
    shl_collection_t *c = shl_catalog_get(eng, ns);
    const shl_index_t *idx = shl_collection_find_index(c, name);
    bool mk = idx != NULL && idx->multikey;
    shl_collection_release(c);
    return mk;
}

SHL_TEST(multikey_flag_set_by_writes_and_durable)
{
    char *dir = tmpdir();
    shl_storage_engine_t *eng = open_eng(dir, false);
    shl_storage_txn_t *txn;
    shl_status_t st;
    shl_collection_t *c;
    bool created;
    bson_t *arr = shl_test_bson("{'_id': 3, 'a': [1, 2], 'b': [5, 6]}");

    ASSERT(eng != NULL);
    ASSERT_INT_EQ(shl_catalog_create_collection(eng, "db.m", NULL, NULL, NULL, &st), 0);
    ASSERT_INT_EQ(insert_json(eng, "db.m", "{'_id': 1, 'a': 1, 'b': [1, 2]}", &st), 0);
    ASSERT_INT_EQ(shl_catalog_create_index(eng, "db.m", T("{'key': {'a': 1}, 'name': 'a_1'}"),
                                           &created, NULL, &st),
                  0);
    /* A build over an array document marks the new index. */
    ASSERT_INT_EQ(shl_catalog_create_index(eng, "db.m", T("{'key': {'b': 1}, 'name': 'b_1'}"),
                                           &created, NULL, &st),
                  0);
    ASSERT(!is_multikey(eng, "db.m", "a_1"));
    ASSERT(is_multikey(eng, "db.m", "b_1"));
    ASSERT(!is_multikey(eng, "db.m", "_id_"));
    /* A single-element array makes one key, but the path holds an array: multikey. */
    ASSERT_INT_EQ(shl_catalog_create_collection(eng, "db.s", NULL, NULL, NULL, &st), 0);
    ASSERT_INT_EQ(shl_catalog_create_index(eng, "db.s", T("{'key': {'a': 1}, 'name': 'a_1'}"),
                                           &created, NULL, &st),
                  0);
    ASSERT_INT_EQ(insert_json(eng, "db.s", "{'_id': 2, 'a': 7}", &st), 0);
    ASSERT(!is_multikey(eng, "db.s", "a_1"));
    ASSERT_INT_EQ(insert_json(eng, "db.s", "{'_id': 3, 'a': [7]}", &st), 0);
    ASSERT(is_multikey(eng, "db.s", "a_1"));
    /* A write publishes the flag in memory before it commits (queries planning from
     * metadata read after their snapshot never miss it); an aborted write leaves it set in
     * memory -- conservative, as MongoDB's multikey side writes -- but not in the durable
     * entry (checked after the restart below, once committed writes set it). */
    c = shl_catalog_get(eng, "db.m");
    ASSERT_INT_EQ(shl_storage_txn_begin(eng, NULL, &txn, &st), 0);
    ASSERT_INT_EQ(shl_doc_insert(txn, c, arr, NULL, NULL, &st), 0);
    ASSERT(is_multikey(eng, "db.m", "a_1"));
    shl_storage_txn_abort(txn);
    ASSERT(is_multikey(eng, "db.m", "a_1"));
    /* A committed one sets it; the old snapshot is unchanged. */
    ASSERT_INT_EQ(shl_storage_txn_begin(eng, NULL, &txn, &st), 0);
    ASSERT_INT_EQ(shl_doc_insert(txn, c, arr, NULL, NULL, &st), 0);
    ASSERT_INT_EQ(shl_storage_txn_commit(txn, &st), 0);
    ASSERT(!c->indexes[1]->multikey);
    shl_collection_release(c);
    ASSERT(is_multikey(eng, "db.m", "a_1"));
    ASSERT(is_multikey(eng, "db.m", "b_1"));
    /* Deleting the array documents does not clear it, and it survives a restart. */
    shl_storage_close(eng);
    eng = open_eng(dir, false);
    ASSERT(eng != NULL);
    ASSERT(is_multikey(eng, "db.m", "a_1"));
    ASSERT(is_multikey(eng, "db.m", "b_1"));
    ASSERT(!is_multikey(eng, "db.m", "_id_"));
    shl_storage_close(eng);
    bson_destroy(arr);
    rmrf(dir);
    bson_free(dir);
    tmp_free();
}

/* An index's multikey paths and numeric types in the current catalog snapshot. */
static void
index_flags(shl_storage_engine_t *eng, const char *ns, const char *name, uint64_t *paths,
            uint64_t *types)
{
    shl_collection_t *c = shl_catalog_get(eng, ns);
    const shl_index_t *idx = shl_collection_find_index(c, name);
    *paths = idx != NULL ? idx->multikey_paths : 0;
    *types = idx != NULL ? idx->num_types : 0;
    shl_collection_release(c);
}

SHL_TEST(index_multikey_paths_and_numeric_types_durable)
{
    char *dir = tmpdir();
    shl_storage_engine_t *eng = open_eng(dir, false);
    shl_status_t st;
    bool created;
    uint64_t paths, types;

    ASSERT(eng != NULL);
    ASSERT_INT_EQ(shl_catalog_create_collection(eng, "db.t", NULL, NULL, NULL, &st), 0);
    ASSERT_INT_EQ(insert_json(eng, "db.t", "{'_id': 1, 'a': 1, 'b': 'x'}", &st), 0);
    ASSERT_INT_EQ(shl_catalog_create_index(eng, "db.t",
                                           T("{'key': {'a': 1, 'b': 1}, 'name': 'a_1_b_1'}"),
                                           &created, NULL, &st),
                  0);
    index_flags(eng, "db.t", "a_1_b_1", &paths, &types);
    ASSERT(paths == 0);
    ASSERT(types == SHL_NUM_TYPE_BIT(0, 0)); /* the build saw an int32 in a */
    ASSERT_INT_EQ(insert_json(eng, "db.t", "{'_id': 2, 'a': 2.5, 'b': [1, 'y']}", &st), 0);
    index_flags(eng, "db.t", "a_1_b_1", &paths, &types);
    ASSERT(paths == 2); /* b held an array, a never did */
    ASSERT(types == (SHL_NUM_TYPE_BIT(0, 0) | SHL_NUM_TYPE_BIT(0, 2) | SHL_NUM_TYPE_BIT(1, 0)));
    shl_storage_close(eng);
    eng = open_eng(dir, false);
    ASSERT(eng != NULL);
    index_flags(eng, "db.t", "a_1_b_1", &paths, &types);
    ASSERT(paths == 2);
    ASSERT(types == (SHL_NUM_TYPE_BIT(0, 0) | SHL_NUM_TYPE_BIT(0, 2) | SHL_NUM_TYPE_BIT(1, 0)));
    index_flags(eng, "db.t", "_id_", &paths, &types);
    ASSERT(types == SHL_NUM_TYPE_BIT(0, 0));
    shl_storage_close(eng);
    rmrf(dir);
    bson_free(dir);
    tmp_free();
}

/* The rids an index cursor yields over [start, end), as "r1,r2,...". */
static char *index_scan_raw(shl_storage_engine_t *eng, const char *ns, const char *index,
                            const bson_value_t *lo, const bson_value_t *hi, bool descending_key,
                            bool forward);

#define ASSERT_ISCAN(want, ...)                                                                    \
    do {                                                                                           \
        char *got_is_ = index_scan_raw(__VA_ARGS__);                                               \
        bool same_is_ = strcmp(got_is_, (want)) == 0;                                              \
        if (!same_is_) {                                                                           \
            shl_test_fail_here(__FILE__, __LINE__, "index scan: got %s want %s", got_is_, (want)); \
        }                                                                                          \
        bson_free(got_is_);                                                                        \
        if (!same_is_) {                                                                           \
            return;                                                                                \
        }                                                                                          \
    } while (0)

static char *
index_scan_raw(shl_storage_engine_t *eng, const char *ns, const char *index, const bson_value_t *lo,
               const bson_value_t *hi, bool descending_key, bool forward)
{
    shl_storage_txn_t *txn;
    shl_index_cursor_t *ic;
    shl_status_t st;
    shl_keystring_t a, b;
    shl_key_bound_t start = {0}, end = {0};
    shl_collection_t *c = shl_catalog_get(eng, ns);
    const shl_index_t *idx = shl_collection_find_index(c, index);
    bson_string_t *s = bson_string_new("");

    shl_keystring_init(&a);
    shl_keystring_init(&b);
    if (lo != NULL) {
        shl_keystring_append_value(&a, lo, descending_key);
        start.data = a.data;
        start.len = a.len;
    }
    if (hi != NULL) {
        shl_keystring_append_value(&b, hi, descending_key);
        end.data = b.data;
        end.len = b.len;
    }
    shl_storage_txn_begin(eng, NULL, &txn, &st);
    shl_index_cursor_open(txn, idx, &start, &end, forward, &ic, &st);
    for (;;) {
        int64_t rid;
        bool eof;
        if (shl_index_cursor_next(ic, &rid, NULL, NULL, &eof, &st) != 0 || eof) {
            break;
        }
        bson_string_append_printf(s, "%s%lld", s->len ? "," : "", (long long)rid);
    }
    shl_index_cursor_close(ic);
    shl_storage_txn_abort(txn);
    shl_collection_release(c);
    shl_keystring_cleanup(&a);
    shl_keystring_cleanup(&b);
    return bson_string_free(s, false);
}

SHL_TEST(index_bounds_scans_both_directions)
{
    char *dir = tmpdir();
    shl_storage_engine_t *eng = open_eng(dir, false);
    shl_status_t st;
    bson_value_t v3 = {.value_type = BSON_TYPE_INT32, .value.v_int32 = 3};
    bson_value_t v6 = {.value_type = BSON_TYPE_DOUBLE, .value.v_double = 6.0};

    ASSERT(eng != NULL);
    ASSERT_INT_EQ(shl_catalog_create_collection(eng, "i.c", NULL, NULL, NULL, &st), 0);
    /* rids 1..8 with a = 5, 1, 3, 7, 3, 6.5, 'str', missing */
    ASSERT_INT_EQ(insert_json(eng, "i.c", "{'_id': 1, 'a': 5}", &st), 0);
    ASSERT_INT_EQ(insert_json(eng, "i.c", "{'_id': 2, 'a': 1}", &st), 0);
    ASSERT_INT_EQ(insert_json(eng, "i.c", "{'_id': 3, 'a': {'$numberLong': '3'}}", &st), 0);
    ASSERT_INT_EQ(insert_json(eng, "i.c", "{'_id': 4, 'a': 7}", &st), 0);
    ASSERT_INT_EQ(insert_json(eng, "i.c", "{'_id': 5, 'a': 3.0}", &st), 0);
    ASSERT_INT_EQ(insert_json(eng, "i.c", "{'_id': 6, 'a': 6.5}", &st), 0);
    ASSERT_INT_EQ(insert_json(eng, "i.c", "{'_id': 7, 'a': 'str'}", &st), 0);
    ASSERT_INT_EQ(insert_json(eng, "i.c", "{'_id': 8}", &st), 0);
    ASSERT_INT_EQ(shl_catalog_create_index(eng, "i.c", T("{'key': {'a': 1}, 'name': 'a_1'}"), NULL,
                                           NULL, &st),
                  0);
    ASSERT_INT_EQ(shl_catalog_create_index(eng, "i.c", T("{'key': {'a': -1}, 'name': 'a_-1'}"),
                                           NULL, NULL, &st),
                  0);
    /* Full scans: null (missing) < numbers (by value; 3 == 3.0, ties by rid) < strings. */
    ASSERT_ISCAN("8,2,3,5,1,6,4,7", eng, "i.c", "a_1", NULL, NULL, false, true);
    ASSERT_ISCAN("7,4,6,1,5,3,2,8", eng, "i.c", "a_1", NULL, NULL, false, false);
    /* [3, 6) */
    ASSERT_ISCAN("3,5,1", eng, "i.c", "a_1", &v3, &v6, false, true);
    ASSERT_ISCAN("1,5,3", eng, "i.c", "a_1", &v3, &v6, false, false);
    /* Descending index: keys sort high to low, so [6, 3) means 6 >= a > 3. */
    /* (equal keys stay in RecordId order: the suffix is not inverted, as in MongoDB) */
    ASSERT_ISCAN("7,4,6,1,3,5,2,8", eng, "i.c", "a_-1", NULL, NULL, true, true);
    ASSERT_ISCAN("1", eng, "i.c", "a_-1", &v6, &v3, true, true);
    ASSERT_ISCAN("6,4,7", eng, "i.c", "a_1", &v6, NULL, false, true);
    ASSERT_ISCAN("2,8", eng, "i.c", "a_1", NULL, &v3, false, false);

    /* Multikey and parallel arrays with the default key generator. */
    ASSERT_INT_EQ(insert_json(eng, "i.c", "{'_id': 9, 'a': [2, 3, 2]}", &st), 0);
    ASSERT_ISCAN("3,5,9,1", eng, "i.c", "a_1", &v3, &v6, false, true);
    ASSERT_INT_EQ(shl_catalog_create_index(eng, "i.c",
                                           T("{'key': {'a': 1, 'b.c': 1}, 'name': "
                                             "'ab'}"),
                                           NULL, NULL, &st),
                  0);
    ASSERT_INT_EQ(insert_json(eng, "i.c", "{'_id': 10, 'a': [1], 'b': [{'c': 1}]}", &st),
                  SHL_CODE_CANNOT_INDEX_PARALLEL_ARRAYS);
    ASSERT_STR_EQ(st.reason, "cannot index parallel arrays [b.c] [a]");
    ASSERT_INT_EQ(insert_json(eng, "i.c", "{'_id': 10, 'a': 1, 'b': [{'c': 1}, {'c': 2}]}", &st),
                  0);
    shl_storage_close(eng);
    rmrf(dir);
    bson_free(dir);
    tmp_free();
}

/* ---------------------------------------------------------------------------------
 * Oplog
 * ------------------------------------------------------------------------------ */

SHL_TEST(oplog_entries_format_and_order)
{
    char *dir = tmpdir();
    shl_storage_engine_t *eng = open_eng(dir, false);
    shl_storage_txn_t *txn;
    shl_status_t st;
    shl_collection_t *c;
    bson_t *e, stripped;
    size_t n;
    uint64_t start, ts_n;
    bson_t *o = shl_test_bson("{'msg': 'hello'}");
    bson_t *up = shl_test_bson("{'_id': 1, 'x': 2}");
    bson_value_t id1 = {.value_type = BSON_TYPE_INT32, .value.v_int32 = 1};
    bson_iter_t it;

    ASSERT(eng != NULL);
    start = shl_storage_clock_now(eng);
    ASSERT_INT_EQ(shl_catalog_create_collection(eng, "o.c", NULL, NULL, NULL, &st), 0);
    ASSERT_INT_EQ(insert_json(eng, "o.c", "{'_id': 1, 'x': 1}", &st), 0);
    c = shl_catalog_get(eng, "o.c");
    ASSERT_INT_EQ(shl_storage_txn_begin(eng, NULL, &txn, &st), 0);
    {
        bson_t cur;
        int64_t rid;
        bool found;
        ASSERT_INT_EQ(shl_doc_find_by_id(txn, c, &id1, &cur, &rid, &found, &st), 0);
        ASSERT_INT_EQ(shl_doc_update(txn, c, rid, &cur, up, NULL, &st), 0);
        ASSERT_INT_EQ(shl_doc_delete(txn, c, rid, up, NULL, &st), 0);
        bson_destroy(&cur);
    }
    ASSERT_INT_EQ(shl_oplog_append(txn, 'n', "", NULL, o, NULL, NULL, &ts_n, &st), 0);
    ASSERT_INT_EQ(shl_oplog_append(txn, 'x', "", NULL, o, NULL, NULL, NULL, &st),
                  SHL_CODE_BAD_VALUE);
    ASSERT_INT_EQ(shl_storage_txn_commit(txn, &st), 0);
    ASSERT_INT_EQ(shl_catalog_create_index(eng, "o.c", T("{'key': {'x': 1}, 'name': 'x_1'}"), NULL,
                                           NULL, &st),
                  0);
    ASSERT_INT_EQ(shl_catalog_drop_index(eng, "o.c", "x_1", NULL, &st), 0);
    ASSERT_INT_EQ(shl_catalog_rename_collection(eng, "o.c", "o.d", false, NULL, &st), 0);
    ASSERT_INT_EQ(shl_catalog_drop_collection(eng, "o.d", NULL, &st), 0);
    ASSERT_INT_EQ(shl_catalog_drop_database(eng, "o", NULL, &st), 0);

    n = read_oplog(eng, start, &e);
    ASSERT_INT_EQ(n, 9); /* the database was already empty: no dropDatabase entry */
    for (size_t i = 1; i < n; i++) {
        ASSERT(entry_ts(&e[i]) > entry_ts(&e[i - 1]));
    }
    ASSERT_INT_EQ(entry_ts(&e[4]), ts_n);
    /* MongoDB's fields and order: op, ns, ui, o, o2, ts, t, v, wall */
    bson_iter_init(&it, &e[1]);
    {
        const char *keys[] = {"op", "ns", "ui", "o", "o2", "ts", "t", "v", "wall"};
        for (int i = 0; i < 9; i++) {
            ASSERT(bson_iter_next(&it));
            ASSERT_STR_EQ(bson_iter_key(&it), keys[i]);
        }
        ASSERT(bson_iter_init_find(&it, &e[1], "ui") && BSON_ITER_HOLDS_BINARY(&it));
        ASSERT(bson_iter_init_find(&it, &e[1], "wall") && BSON_ITER_HOLDS_DATE_TIME(&it));
    }
    strip_entry(&e[0], &stripped);
    ASSERT_BSON_EQ(&stripped, "{'op': 'c', 'ns': 'o.$cmd', 'o': {'create': 'c', 'idIndex': {'v': "
                              "2, 'key': {'_id': 1}, 'name': '_id_'}}, 't': {'$numberLong': "
                              "'-1'}, 'v': {'$numberLong': '2'}}");
    bson_destroy(&stripped);
    strip_entry(&e[1], &stripped);
    ASSERT_BSON_EQ(&stripped, "{'op': 'i', 'ns': 'o.c', 'o': {'_id': 1, 'x': 1}, 'o2': {'_id': "
                              "1}, 't': {'$numberLong': '-1'}, 'v': {'$numberLong': '2'}}");
    bson_destroy(&stripped);
    strip_entry(&e[2], &stripped);
    ASSERT_BSON_EQ(&stripped, "{'op': 'u', 'ns': 'o.c', 'o': {'_id': 1, 'x': 2}, 'o2': {'_id': "
                              "1}, 't': {'$numberLong': '-1'}, 'v': {'$numberLong': '2'}}");
    bson_destroy(&stripped);
    strip_entry(&e[3], &stripped);
    ASSERT_BSON_EQ(&stripped, "{'op': 'd', 'ns': 'o.c', 'o': {'_id': 1}, 't': {'$numberLong': "
                              "'-1'}, 'v': {'$numberLong': '2'}}");
    bson_destroy(&stripped);
    strip_entry(&e[4], &stripped);
    ASSERT_BSON_EQ(&stripped, "{'op': 'n', 'ns': '', 'o': {'msg': 'hello'}, 't': {'$numberLong': "
                              "'-1'}, 'v': {'$numberLong': '2'}}");
    bson_destroy(&stripped);
    strip_entry(&e[5], &stripped);
    ASSERT_BSON_EQ(&stripped, "{'op': 'c', 'ns': 'o.$cmd', 'o': {'createIndexes': 'c', 'v': 2, "
                              "'key': {'x': 1}, 'name': 'x_1'}, 't': {'$numberLong': '-1'}, "
                              "'v': {'$numberLong': '2'}}");
    bson_destroy(&stripped);
    strip_entry(&e[6], &stripped);
    ASSERT_BSON_EQ(&stripped, "{'op': 'c', 'ns': 'o.$cmd', 'o': {'dropIndexes': 'c', 'index': "
                              "'x_1'}, 'o2': {'v': 2, 'key': {'x': 1}, 'name': 'x_1'}, 't': "
                              "{'$numberLong': '-1'}, 'v': {'$numberLong': '2'}}");
    bson_destroy(&stripped);
    strip_entry(&e[7], &stripped);
    ASSERT_BSON_EQ(&stripped, "{'op': 'c', 'ns': 'o.$cmd', 'o': {'renameCollection': 'o.c', "
                              "'to': 'o.d', 'stayTemp': false}, 't': {'$numberLong': '-1'}, "
                              "'v': {'$numberLong': '2'}}");
    bson_destroy(&stripped);
    strip_entry(&e[8], &stripped);
    ASSERT_BSON_EQ(&stripped, "{'op': 'c', 'ns': 'o.$cmd', 'o': {'drop': 'd'}, 'o2': "
                              "{'numRecords': {'$numberLong': '0'}}, 't': {'$numberLong': "
                              "'-1'}, 'v': {'$numberLong': '2'}}");
    bson_destroy(&stripped);
    free_docs(e, n);
    /* The oplog is local.oplog.rs in the catalog; writes to it are refused. */
    {
        shl_collection_t *ol = shl_catalog_get(eng, "local.oplog.rs");
        bson_t *d = shl_test_bson("{'_id': 1}");
        ASSERT(ol != NULL && ol->is_oplog);
        ASSERT_INT_EQ(shl_storage_txn_begin(eng, NULL, &txn, &st), 0);
        ASSERT_INT_EQ(shl_doc_insert(txn, ol, d, NULL, NULL, &st), SHL_CODE_ILLEGAL_OPERATION);
        shl_storage_txn_abort(txn);
        shl_collection_release(ol);
        bson_destroy(d);
    }
    shl_collection_release(c);
    shl_storage_close(eng);
    bson_destroy(o);
    bson_destroy(up);
    rmrf(dir);
    bson_free(dir);
    tmp_free();
}

SHL_TEST(oplog_readers_stop_at_the_no_holes_point)
{
    char *dir = tmpdir();
    shl_storage_engine_t *eng = open_eng(dir, false);
    shl_storage_txn_t *a, *b;
    shl_status_t st;
    shl_collection_t *c;
    bson_t *da = shl_test_bson("{'_id': 'a'}"), *db = shl_test_bson("{'_id': 'b'}");
    bson_t *e;
    size_t n;
    uint64_t start, ts_a, ts_b;
    char wt_ts[32];

    ASSERT(eng != NULL);
    ASSERT_INT_EQ(shl_catalog_create_collection(eng, "h.c", NULL, NULL, NULL, &st), 0);
    c = shl_catalog_get(eng, "h.c");
    start = shl_storage_clock_now(eng);
    ASSERT_INT_EQ(shl_storage_all_durable(eng), start);
    /* A takes the earlier timestamp, B the later one; B commits first. */
    ASSERT_INT_EQ(shl_storage_txn_begin(eng, NULL, &a, &st), 0);
    ASSERT_INT_EQ(shl_storage_txn_begin(eng, NULL, &b, &st), 0);
    ASSERT_INT_EQ(shl_doc_insert(a, c, da, NULL, NULL, &st), 0);
    ts_a = shl_storage_txn_last_ts(a);
    ASSERT_INT_EQ(shl_doc_insert(b, c, db, NULL, NULL, &st), 0);
    ts_b = shl_storage_txn_last_ts(b);
    ASSERT(ts_b > ts_a);
    ASSERT_INT_EQ(shl_storage_txn_commit(b, &st), 0);
    /* The hole at ts_a hides B's entry from oplog readers. */
    ASSERT_INT_EQ(shl_storage_all_durable(eng), ts_a - 1);
    n = read_oplog(eng, start, &e);
    ASSERT_INT_EQ(n, 0);
    free_docs(e, n);
    /* WiredTiger's own all_durable agrees once A has set its timestamp. */
    ASSERT_INT_EQ(eng->conn->query_timestamp(eng->conn, wt_ts, "get=all_durable"), 0);
    ASSERT_INT_EQ(strtoull(wt_ts, NULL, 16), ts_a - 1);
    ASSERT_INT_EQ(shl_storage_txn_commit(a, &st), 0);
    ASSERT_INT_EQ(shl_storage_all_durable(eng), ts_b);
    n = read_oplog(eng, start, &e);
    ASSERT_INT_EQ(n, 2);
    ASSERT_INT_EQ(entry_ts(&e[0]), ts_a);
    ASSERT_INT_EQ(entry_ts(&e[1]), ts_b);
    free_docs(e, n);
    /* An aborted transaction closes its hole too. */
    ASSERT_INT_EQ(shl_storage_txn_begin(eng, NULL, &a, &st), 0);
    ASSERT_INT_EQ(shl_oplog_append(a, 'n', "", NULL, da, NULL, NULL, &ts_a, &st), 0);
    ASSERT_INT_EQ(shl_storage_all_durable(eng), ts_a - 1);
    shl_storage_txn_abort(a);
    ASSERT_INT_EQ(shl_storage_all_durable(eng), ts_a);
    shl_collection_release(c);
    shl_storage_close(eng);
    bson_destroy(da);
    bson_destroy(db);
    rmrf(dir);
    bson_free(dir);
    tmp_free();
}

SHL_TEST(batch_in_one_txn_gets_distinct_timestamps)
{
    char *dir = tmpdir();
    shl_storage_engine_t *eng = open_eng(dir, false);
    shl_storage_txn_t *txn;
    shl_status_t st;
    shl_collection_t *c;
    bson_t *e;
    size_t n;
    uint64_t start;

    ASSERT(eng != NULL);
    ASSERT_INT_EQ(shl_catalog_create_collection(eng, "b.c", NULL, NULL, NULL, &st), 0);
    c = shl_catalog_get(eng, "b.c");
    start = shl_storage_clock_now(eng);
    ASSERT_INT_EQ(shl_storage_txn_begin(eng, NULL, &txn, &st), 0);
    for (int i = 0; i < 5; i++) {
        bson_t *d = BCON_NEW("_id", BCON_INT32(i));
        ASSERT_INT_EQ(shl_doc_insert(txn, c, d, NULL, NULL, &st), 0);
        bson_destroy(d);
    }
    ASSERT_INT_EQ(shl_storage_txn_commit(txn, &st), 0);
    n = read_oplog(eng, start, &e);
    ASSERT_INT_EQ(n, 5);
    for (size_t i = 1; i < n; i++) {
        ASSERT_INT_EQ(entry_ts(&e[i]), entry_ts(&e[i - 1]) + 1);
    }
    /* A snapshot read at the third entry's timestamp sees exactly three documents. */
    {
        shl_storage_txn_opts_t o = {.read_timestamp = entry_ts(&e[2])};
        shl_record_cursor_t *rc;
        int count = 0;
        ASSERT_INT_EQ(shl_storage_txn_begin(eng, &o, &txn, &st), 0);
        ASSERT_INT_EQ(shl_record_cursor_open(txn, c, true, &rc, &st), 0);
        for (;;) {
            int64_t rid;
            bson_t doc;
            bool eof;
            ASSERT_INT_EQ(shl_record_cursor_next(rc, &rid, &doc, &eof, &st), 0);
            if (eof) {
                break;
            }
            count++;
        }
        shl_record_cursor_close(rc);
        shl_storage_txn_abort(txn);
        ASSERT_INT_EQ(count, 3);
    }
    free_docs(e, n);
    shl_collection_release(c);
    shl_storage_close(eng);
    rmrf(dir);
    bson_free(dir);
    tmp_free();
}

/* Documents of 'c' visible at 'ts' (0: latest) into *out. */
static void
count_at(shl_storage_engine_t *eng, shl_collection_t *c, uint64_t ts, int *out)
{
    shl_storage_txn_opts_t o = {.read_timestamp = ts};
    shl_storage_txn_t *txn;
    shl_record_cursor_t *rc;
    shl_status_t st;
    int count = 0;

    ASSERT_INT_EQ(shl_storage_txn_begin(eng, ts != 0 ? &o : NULL, &txn, &st), 0);
    ASSERT_INT_EQ(shl_record_cursor_open(txn, c, true, &rc, &st), 0);
    for (;;) {
        int64_t rid;
        bson_t doc;
        bool eof;
        ASSERT_INT_EQ(shl_record_cursor_next(rc, &rid, &doc, &eof, &st), 0);
        if (eof) {
            break;
        }
        count++;
    }
    shl_record_cursor_close(rc);
    shl_storage_txn_abort(txn);
    *out = count;
}

static int
interrupt_now(void *arg, shl_status_t *st)
{
    (void)arg;
    return shl_status_set(st, SHL_CODE_INTERRUPTED, "interrupted");
}

SHL_TEST(multi_document_txn_one_timestamp_and_prepare)
{
    char *dir = tmpdir();
    shl_storage_engine_t *eng = open_eng(dir, false);
    shl_storage_txn_t *txn, *reader;
    shl_status_t st;
    shl_collection_t *c;
    bson_t *e, o = BSON_INITIALIZER, found;
    size_t n, nops, bytes;
    uint64_t start, ts = 0, pts = 0, dts = 0;
    bool got = false;
    bson_value_t id;
    int k = 0;

    ASSERT(eng != NULL);
    ASSERT_INT_EQ(shl_catalog_create_collection(eng, "m.c", NULL, NULL, NULL, &st), 0);
    c = shl_catalog_get(eng, "m.c");
    start = shl_storage_clock_now(eng);
    /* Multi mode: no entries of its own, the ops collected, one commit timestamp. */
    ASSERT_INT_EQ(shl_storage_txn_begin(eng, NULL, &txn, &st), 0);
    shl_storage_txn_set_multi(txn, true);
    for (int i = 0; i < 3; i++) {
        bson_t *d = BCON_NEW("_id", BCON_INT32(i), "a", "[", BCON_INT32(1), BCON_INT32(2), "]");
        ASSERT_INT_EQ(shl_doc_insert(txn, c, d, NULL, NULL, &st), 0);
        bson_destroy(d);
    }
    ASSERT(shl_storage_txn_ops(txn, &nops, &bytes) != NULL);
    ASSERT_INT_EQ(nops, 3);
    ASSERT(bytes > 0);
    shl_storage_txn_set_multi(txn, false);
    BSON_APPEND_UTF8(&o, "msg", "commit");
    ASSERT_INT_EQ(shl_oplog_append(txn, 'n', "", NULL, &o, NULL, NULL, &ts, &st), 0);
    ASSERT_INT_EQ(shl_storage_txn_commit(txn, &st), 0);
    n = read_oplog(eng, start, &e);
    ASSERT_INT_EQ(n, 1);
    free_docs(e, n);
    count_at(eng, c, ts - 1, &k);
    ASSERT_INT_EQ(k, 0);
    count_at(eng, c, ts, &k);
    ASSERT_INT_EQ(k, 3);

    /* Prepare: a reader of the prepared document waits until interrupted; the commit at the
     * prepare time with a later durable time makes it visible. */
    ASSERT_INT_EQ(shl_storage_txn_begin(eng, NULL, &txn, &st), 0);
    shl_storage_txn_set_multi(txn, true);
    {
        bson_t *d = BCON_NEW("_id", BCON_INT32(10));
        ASSERT_INT_EQ(shl_doc_insert(txn, c, d, NULL, NULL, &st), 0);
        bson_destroy(d);
    }
    ASSERT_INT_EQ(shl_storage_txn_reserve(txn, &pts, &st), 0);
    ASSERT_INT_EQ(shl_storage_txn_prepare(txn, pts, &st), 0);
    id.value_type = BSON_TYPE_INT32;
    id.value.v_int32 = 10;
    ASSERT_INT_EQ(shl_storage_txn_begin(eng, NULL, &reader, &st), 0);
    shl_storage_set_interrupt(interrupt_now, NULL);
    ASSERT_INT_EQ(shl_doc_find_by_id(reader, c, &id, &found, NULL, &got, &st),
                  SHL_CODE_INTERRUPTED);
    bson_destroy(&found);
    shl_storage_set_interrupt(NULL, NULL);
    shl_storage_txn_abort(reader);
    ASSERT_INT_EQ(shl_storage_txn_reserve(txn, &dts, &st), 0);
    ASSERT(dts > pts);
    ASSERT_INT_EQ(shl_storage_txn_commit_at(txn, pts, dts, &st), 0);
    count_at(eng, c, pts - 1, &k);
    ASSERT_INT_EQ(k, 3);
    count_at(eng, c, pts, &k);
    ASSERT_INT_EQ(k, 4);
    bson_destroy(&o);
    shl_collection_release(c);
    shl_storage_close(eng);
    rmrf(dir);
    bson_free(dir);
    tmp_free();
}

/* ---------------------------------------------------------------------------------
 * Write conflicts
 * ------------------------------------------------------------------------------ */

typedef struct inc_arg {
    shl_storage_engine_t *eng;
    shl_collection_t *coll;
    atomic_int *conflicts_seen;
} inc_arg_t;

/* Read doc _id 1, increment 'n', write it back (a read-modify-write). */
static int
inc_fn(shl_storage_txn_t *txn, void *arg, shl_status_t *st)
{
    inc_arg_t *a = arg;
    bson_value_t id = {.value_type = BSON_TYPE_INT32, .value.v_int32 = 1};
    bson_t cur, *next = NULL;
    bson_iter_t it;
    int64_t rid;
    bool found;
    int ret = shl_doc_find_by_id(txn, a->coll, &id, &cur, &rid, &found, st);
    if (ret == 0 && found && bson_iter_init_find(&it, &cur, "n")) {
        next = BCON_NEW("_id", BCON_INT32(1), "n", BCON_INT32(bson_iter_int32(&it) + 1));
        ret = shl_doc_update(txn, a->coll, rid, &cur, next, NULL, st);
        if (ret == SHL_CODE_WRITE_CONFLICT) {
            atomic_fetch_add(a->conflicts_seen, 1);
        }
        bson_destroy(next);
    }
    bson_destroy(&cur);
    return ret;
}

static void *
inc_thread(void *arg)
{
    inc_arg_t *a = arg;
    shl_status_t st;
    for (int i = 0; i < 200; i++) {
        if (shl_storage_write_retry(a->eng, inc_fn, a, NULL, &st) != 0) {
            fprintf(stderr, "inc failed: %s\n", st.reason);
        }
    }
    return NULL;
}

SHL_TEST(write_conflicts_and_retry)
{
    char *dir = tmpdir();
    shl_storage_engine_t *eng = open_eng(dir, false);
    shl_storage_txn_t *t1, *t2;
    shl_status_t st;
    shl_collection_t *c;
    bson_t *v1 = shl_test_bson("{'_id': 1, 'n': 100}"), *v2 = shl_test_bson("{'_id': 1, 'n': 200}");
    atomic_int conflicts = 0;
    inc_arg_t a;
    pthread_t th[4];

    ASSERT(eng != NULL);
    ASSERT_INT_EQ(shl_catalog_create_collection(eng, "w.c", NULL, NULL, NULL, &st), 0);
    ASSERT_INT_EQ(insert_json(eng, "w.c", "{'_id': 1, 'n': 0}", &st), 0);
    c = shl_catalog_get(eng, "w.c");
    /* Two write units update the same document: the second one conflicts. */
    ASSERT_INT_EQ(shl_storage_txn_begin(eng, NULL, &t1, &st), 0);
    ASSERT_INT_EQ(shl_storage_txn_begin(eng, NULL, &t2, &st), 0);
    ASSERT_INT_EQ(shl_doc_update(t1, c, 1, NULL, v1, NULL, &st), 0);
    ASSERT_INT_EQ(shl_doc_update(t2, c, 1, NULL, v2, NULL, &st), SHL_CODE_WRITE_CONFLICT);
    ASSERT(strstr(st.reason, "WriteConflict") != NULL);
    shl_storage_txn_abort(t2);
    ASSERT_INT_EQ(shl_storage_txn_commit(t1, &st), 0);
    /* Two inserts of the same _id racing: one wins, the other conflicts (then dup). */
    ASSERT_INT_EQ(shl_storage_txn_begin(eng, NULL, &t1, &st), 0);
    ASSERT_INT_EQ(shl_storage_txn_begin(eng, NULL, &t2, &st), 0);
    {
        bson_t *d = shl_test_bson("{'_id': 2}");
        ASSERT_INT_EQ(shl_doc_insert(t1, c, d, NULL, NULL, &st), 0);
        ASSERT_INT_EQ(shl_doc_insert(t2, c, d, NULL, NULL, &st), SHL_CODE_WRITE_CONFLICT);
        bson_destroy(d);
    }
    shl_storage_txn_abort(t2);
    ASSERT_INT_EQ(shl_storage_txn_commit(t1, &st), 0);
    ASSERT_INT_EQ(shl_collection_num_records(c), 2);

    /* Concurrent read-modify-write increments: retries make every one count. */
    ASSERT_INT_EQ(shl_storage_txn_begin(eng, NULL, &t1, &st), 0);
    {
        bson_t *zero = shl_test_bson("{'_id': 1, 'n': 0}");
        ASSERT_INT_EQ(shl_doc_update(t1, c, 1, NULL, zero, NULL, &st), 0);
        bson_destroy(zero);
    }
    ASSERT_INT_EQ(shl_storage_txn_commit(t1, &st), 0);
    a.eng = eng;
    a.coll = c;
    a.conflicts_seen = &conflicts;
    for (int i = 0; i < 4; i++) {
        pthread_create(&th[i], NULL, inc_thread, &a);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
    }
    {
        char *json = scan_json(eng, "w.c", true);
        ASSERT_STR_EQ(json, "[{ \"_id\" : 1, \"n\" : 800 }, { \"_id\" : 2 }]");
        bson_free(json);
    }
    fprintf(stderr, "  (%d write conflicts retried)\n", atomic_load(&conflicts));
    shl_collection_release(c);
    shl_storage_close(eng);
    bson_destroy(v1);
    bson_destroy(v2);
    rmrf(dir);
    bson_free(dir);
    tmp_free();
}

/* ---------------------------------------------------------------------------------
 * Capped collections
 * ------------------------------------------------------------------------------ */

SHL_TEST(capped_collection_keeps_newest)
{
    char *dir = tmpdir();
    shl_storage_engine_t *eng = open_eng(dir, false);
    shl_status_t st;
    shl_collection_t *c;

    ASSERT(eng != NULL);
    ASSERT_INT_EQ(shl_catalog_create_collection(eng, "cap.c",
                                                T("{'capped': true, 'size': 100000, 'max': 3}"),
                                                NULL, NULL, &st),
                  0);
    for (int i = 0; i < 6; i++) {
        char json[64];
        snprintf(json, sizeof(json), "{'_id': %d}", i);
        ASSERT_INT_EQ(insert_json(eng, "cap.c", json, &st), 0);
    }
    ASSERT_SCAN(eng, "cap.c", true, "[{ \"_id\" : 3 }, { \"_id\" : 4 }, { \"_id\" : 5 }]");
    c = shl_catalog_get(eng, "cap.c");
    ASSERT(c->capped && c->capped_max == 3);
    ASSERT_INT_EQ(shl_collection_num_records(c), 3);
    shl_collection_release(c);
    shl_storage_close(eng);
    rmrf(dir);
    bson_free(dir);
    tmp_free();
}

/* ---------------------------------------------------------------------------------
 * Size storer
 * ------------------------------------------------------------------------------ */

SHL_TEST(size_storer_persists_counts_across_clean_restarts)
{
    char *dir = tmpdir();
    shl_storage_engine_t *eng = open_eng(dir, false);
    shl_status_t st;
    shl_collection_t *c;
    shl_sizes_t *z = NULL;
    int64_t size, rid;
    char ident[64];

    ASSERT(eng != NULL);
    ASSERT_INT_EQ(shl_catalog_create_collection(eng, "sz.c", NULL, NULL, NULL, &st), 0);
    for (int i = 0; i < 500; i++) {
        char json[64];
        snprintf(json, sizeof(json), "{'_id': %d, 'pad': 'xxxxxxxxxx'}", i);
        ASSERT_INT_EQ(insert_json(eng, "sz.c", json, &st), 0);
    }
    c = shl_catalog_get(eng, "sz.c");
    ASSERT_INT_EQ(shl_collection_num_records(c), 500);
    size = shl_collection_data_size(c);
    snprintf(ident, sizeof(ident), "%s", c->ident);
    shl_collection_release(c);
    shl_storage_close(eng);

    /* A clean shutdown stored exact values. */
    eng = open_eng(dir, false);
    ASSERT(eng != NULL);
    c = shl_catalog_get(eng, "sz.c");
    ASSERT_INT_EQ(shl_collection_num_records(c), 500);
    ASSERT_INT_EQ(shl_collection_data_size(c), size);
    ASSERT_INT_EQ(shl_sizes_load(eng, &z, &st), 0);
    ASSERT(shl_sizes_find(z, ident) != NULL);
    ASSERT_INT_EQ(shl_sizes_find(z, ident)->num_records, 500);
    ASSERT(shl_sizes_find(z, "oplog") != NULL);
    shl_sizes_free(z);
    z = NULL;
    /* Start-up takes the stored values, not a scan: a wrong value survives a restart
     * (validate is what corrects it). */
    shl_collection_set_counts(c, 7, 70);
    shl_collection_release(c);
    shl_storage_close(eng);
    eng = open_eng(dir, false);
    ASSERT(eng != NULL);
    c = shl_catalog_get(eng, "sz.c");
    ASSERT_INT_EQ(shl_collection_num_records(c), 7);
    ASSERT_INT_EQ(shl_collection_data_size(c), 70);
    /* The RecordId counter still starts above the last record (from the table's end). */
    {
        ins_arg_t a = {c, T("{'_id': 'new'}"), 0};
        ASSERT_INT_EQ(shl_storage_write_retry(eng, ins_fn, &a, NULL, &st), 0);
        rid = a.rid;
        ASSERT_INT_EQ(rid, 501);
    }
    ASSERT_INT_EQ(shl_collection_num_records(c), 8);
    shl_collection_release(c);
    /* A dropped collection's entry goes with the next checkpoint. */
    ASSERT_INT_EQ(shl_catalog_drop_collection(eng, "sz.c", NULL, &st), 0);
    ASSERT_INT_EQ(shl_storage_checkpoint(eng, &st), 0);
    ASSERT_INT_EQ(shl_sizes_load(eng, &z, &st), 0);
    ASSERT(shl_sizes_find(z, ident) == NULL);
    shl_sizes_free(z);
    shl_storage_close(eng);
    rmrf(dir);
    bson_free(dir);
    tmp_free();
}

/* ---------------------------------------------------------------------------------
 * Durability
 * ------------------------------------------------------------------------------ */

typedef struct dur_arg {
    shl_storage_engine_t *eng;
    int id;
    int failures;
} dur_arg_t;

static void *
durable_writer(void *arg)
{
    dur_arg_t *a = arg;
    shl_status_t st;
    for (int i = 0; i < 20; i++) {
        char json[64];
        snprintf(json, sizeof(json), "{'_id': %d}", a->id * 1000 + i);
        if (insert_json(a->eng, "j.c", json, &st) != 0 ||
            shl_storage_wait_durable(a->eng, shl_storage_clock_now(a->eng), &st) != 0) {
            a->failures++;
        }
    }
    return NULL;
}

SHL_TEST(wait_durable_group_commit)
{
    char *dir = tmpdir();
    shl_storage_engine_t *eng = open_eng(dir, false);
    shl_status_t st;
    pthread_t th[8];
    dur_arg_t args[8];
    uint64_t flushes;

    ASSERT(eng != NULL);
    ASSERT_INT_EQ(shl_catalog_create_collection(eng, "j.c", NULL, NULL, NULL, &st), 0);
    ASSERT_INT_EQ(insert_json(eng, "j.c", "{'_id': -1}", &st), 0);
    ASSERT_INT_EQ(shl_storage_wait_durable(eng, shl_storage_clock_now(eng), &st), 0);
    ASSERT(atomic_load(&eng->durable_ts) >= shl_storage_clock_now(eng));
    /* Already durable: no new flush. */
    pthread_mutex_lock(&eng->flush_mu);
    flushes = eng->flushes_done;
    pthread_mutex_unlock(&eng->flush_mu);
    ASSERT_INT_EQ(shl_storage_wait_durable(eng, shl_storage_clock_now(eng), &st), 0);
    ASSERT_INT_EQ(eng->flushes_done, flushes);
    for (int i = 0; i < 8; i++) {
        args[i] = (dur_arg_t){.eng = eng, .id = i};
        pthread_create(&th[i], NULL, durable_writer, &args[i]);
    }
    for (int i = 0; i < 8; i++) {
        pthread_join(th[i], NULL);
        ASSERT_INT_EQ(args[i].failures, 0);
    }
    fprintf(stderr, "  (160 durable writes, %llu journal flushes)\n",
            (unsigned long long)(eng->flushes_done - flushes));
    ASSERT(eng->flushes_done - flushes <= 160);
    shl_storage_close(eng);
    rmrf(dir);
    bson_free(dir);
    tmp_free();
}

/* ---------------------------------------------------------------------------------
 * Recovery
 * ------------------------------------------------------------------------------ */

/* Run 'fn' in a forked child that exits without closing anything (a crash). */
static void
crash_after(const char *dir, void (*fn)(shl_storage_engine_t *eng))
{
    pid_t pid = fork();
    if (pid == 0) {
        shl_storage_engine_t *eng = open_eng(dir, false);
        if (eng == NULL) {
            _exit(2);
        }
        fn(eng);
        _exit(0); /* no close: WT never checkpoints, like kill -9 after the writes */
    }
    waitpid(pid, NULL, 0);
}

static void
ddl_and_writes_then_crash(shl_storage_engine_t *eng)
{
    shl_status_t st;
    /* A stable checkpoint with one collection... */
    shl_catalog_create_collection(eng, "rc.keep", NULL, NULL, NULL, &st);
    insert_json(eng, "rc.keep", "{'_id': 1, 'v': 'before checkpoint'}", &st);
    shl_storage_checkpoint(eng, &st);
    /* ...then DDL and writes only the journal (the oplog) knows about. */
    shl_catalog_create_collection(eng, "rc.new", NULL, NULL, NULL, &st);
    shl_catalog_create_index(eng, "rc.new",
                             T("{'key': {'a': 1}, 'name': 'a_1', "
                               "'unique': true}"),
                             NULL, NULL, &st);
    insert_json(eng, "rc.new", "{'_id': 1, 'a': 10}", &st);
    insert_json(eng, "rc.new", "{'_id': 2, 'a': 20}", &st);
    insert_json(eng, "rc.keep", "{'_id': 2, 'v': 'after checkpoint'}", &st);
    shl_catalog_create_collection(eng, "rc.gone", NULL, NULL, NULL, &st);
    insert_json(eng, "rc.gone", "{'_id': 1}", &st);
    shl_catalog_drop_collection(eng, "rc.gone", NULL, &st);
    shl_catalog_create_collection(eng, "rc.old", NULL, NULL, NULL, &st);
    insert_json(eng, "rc.old", "{'_id': 'x'}", &st);
    shl_catalog_rename_collection(eng, "rc.old", "rc.renamed", false, NULL, &st);
    shl_storage_wait_durable(eng, shl_storage_clock_now(eng), &st);
}

SHL_TEST(recovery_replays_ddl_and_writes_after_the_stable_checkpoint)
{
    char *dir = tmpdir();
    shl_storage_engine_t *eng;
    shl_storage_txn_t *txn;
    shl_collection_t *c;
    shl_status_t st;
    char **dbs;
    bson_value_t a20 = {.value_type = BSON_TYPE_INT32, .value.v_int32 = 20};
    shl_keyset_t keys;
    int64_t rid;
    bool found;

    crash_after(dir, ddl_and_writes_then_crash);
    eng = open_eng(dir, false);
    ASSERT(eng != NULL);
    ASSERT_SCAN(eng, "rc.keep", true,
                "[{ \"_id\" : 1, \"v\" : \"before checkpoint\" }, "
                "{ \"_id\" : 2, \"v\" : \"after checkpoint\" }]");
    ASSERT_SCAN(eng, "rc.new", true, "[{ \"_id\" : 1, \"a\" : 10 }, { \"_id\" : 2, \"a\" : 20 }]");
    ASSERT(shl_catalog_get(eng, "rc.gone") == NULL);
    ASSERT(shl_catalog_get(eng, "rc.old") == NULL);
    ASSERT_SCAN(eng, "rc.renamed", true, "[{ \"_id\" : \"x\" }]");
    /* The replayed index is real and enforced. */
    c = shl_catalog_get(eng, "rc.new");
    ASSERT_INT_EQ(c->nindexes, 2);
    ASSERT_INT_EQ(shl_collection_num_records(c), 2);
    shl_keyset_init(&keys);
    {
        shl_keystring_t kb;
        shl_keystring_init(&kb);
        shl_keystring_append_value(&kb, &a20, false);
        shl_keyset_add(&keys, kb.data, kb.len);
        shl_keystring_cleanup(&kb);
    }
    ASSERT_INT_EQ(shl_storage_txn_begin(eng, NULL, &txn, &st), 0);
    {
        size_t len;
        const uint8_t *k = shl_keyset_key(&keys, 0, &len);
        ASSERT_INT_EQ(shl_index_lookup(txn, c->indexes[1], k, len, &rid, &found, &st), 0);
    }
    ASSERT(found && rid == 2);
    shl_storage_txn_abort(txn);
    shl_keyset_cleanup(&keys);
    ASSERT_INT_EQ(insert_json(eng, "rc.new", "{'_id': 3, 'a': 20}", &st), SHL_CODE_DUPLICATE_KEY);
    shl_collection_release(c);
    shl_catalog_list_databases(eng, &dbs);
    ASSERT_STR_EQ(dbs[0], "local");
    ASSERT_STR_EQ(dbs[1], "rc");
    bson_strfreev(dbs);
    /* A second restart replays nothing (recovery took a stable checkpoint). */
    shl_storage_close(eng);
    eng = open_eng(dir, false);
    ASSERT_SCAN(eng, "rc.new", true, "[{ \"_id\" : 1, \"a\" : 10 }, { \"_id\" : 2, \"a\" : 20 }]");
    shl_storage_close(eng);
    rmrf(dir);
    bson_free(dir);
    tmp_free();
}

static void
multikey_then_crash(shl_storage_engine_t *eng)
{
    shl_status_t st;
    bool created;
    /* The index exists at the stable checkpoint; the array arrives after it. */
    shl_catalog_create_collection(eng, "mk.c", NULL, NULL, NULL, &st);
    shl_catalog_create_index(eng, "mk.c", T("{'key': {'b': 1}, 'name': 'b_1'}"), &created, NULL,
                             &st);
    insert_json(eng, "mk.c", "{'_id': 1, 'b': 1}", &st);
    shl_storage_checkpoint(eng, &st);
    insert_json(eng, "mk.c", "{'_id': 2, 'b': [2, 3]}", &st);
    shl_storage_wait_durable(eng, shl_storage_clock_now(eng), &st);
}

SHL_TEST(recovery_replay_sets_multikey)
{
    char *dir = tmpdir();
    shl_storage_engine_t *eng;

    crash_after(dir, multikey_then_crash);
    eng = open_eng(dir, false);
    ASSERT(eng != NULL);
    ASSERT_SCAN(eng, "mk.c", true,
                "[{ \"_id\" : 1, \"b\" : 1 }, { \"_id\" : 2, \"b\" : [ 2, 3 ] }]");
    ASSERT(is_multikey(eng, "mk.c", "b_1"));
    shl_storage_close(eng);
    eng = open_eng(dir, false);
    ASSERT(is_multikey(eng, "mk.c", "b_1"));
    shl_storage_close(eng);
    rmrf(dir);
    bson_free(dir);
    tmp_free();
}

static void
coll_mod_then_crash(shl_storage_engine_t *eng)
{
    shl_status_t st;
    bson_t info;
    bool created;
    /* The collection and its indexes are in the stable checkpoint; the collMods are not. */
    shl_catalog_create_collection(eng, "cm.c", T("{'validator': {'a': 1}}"), NULL, NULL, &st);
    shl_catalog_create_index(eng, "cm.c",
                             T("{'key': {'t': 1}, 'name': 't_1', "
                               "'expireAfterSeconds': 100}"),
                             &created, NULL, &st);
    shl_catalog_create_index(eng, "cm.c", T("{'key': {'h': 1}, 'name': 'h_1'}"), &created, NULL,
                             &st);
    shl_storage_checkpoint(eng, &st);
    shl_catalog_coll_mod(eng, "cm.c",
                         T("{'validator': {'b': 2}, 'validationLevel': 'moderate', "
                           "'index': {'keyPattern': {'t': 1}, 'expireAfterSeconds': 7}}"),
                         &info, NULL, &st);
    bson_destroy(&info);
    shl_catalog_coll_mod(eng, "cm.c", T("{'index': {'name': 'h_1', 'hidden': true}}"), &info, NULL,
                         &st);
    bson_destroy(&info);
    shl_storage_wait_durable(eng, shl_storage_clock_now(eng), &st);
}

SHL_TEST(catalog_coll_mod_and_its_replay)
{
    char *dir = tmpdir();
    shl_storage_engine_t *eng;
    shl_collection_t *c;
    shl_status_t st;
    bson_t info;

    crash_after(dir, coll_mod_then_crash);
    eng = open_eng(dir, false);
    ASSERT(eng != NULL);
    c = shl_catalog_get(eng, "cm.c");
    ASSERT(c != NULL);
    ASSERT_BSON_EQ(c->options, "{'validator': {'b': 2}, 'validationLevel': 'moderate'}");
    ASSERT_BSON_EQ(shl_collection_find_index(c, "t_1")->spec,
                   "{'v': 2, 'key': {'t': 1}, 'name': 't_1', 'expireAfterSeconds': 7}");
    ASSERT_BSON_EQ(shl_collection_find_index(c, "h_1")->spec,
                   "{'v': 2, 'key': {'h': 1}, 'name': 'h_1', 'hidden': true}");
    shl_collection_release(c);

    /* The reply's fields; a hidden value that changes nothing reports nothing. */
    ASSERT_INT_EQ(shl_catalog_coll_mod(eng, "cm.c",
                                       T("{'index': {'name': 't_1', 'expireAfterSeconds': 9, "
                                         "'hidden': false}}"),
                                       &info, NULL, &st),
                  0);
    ASSERT_BSON_EQ(&info, "{'expireAfterSeconds_old': 7, 'expireAfterSeconds_new': 9}");
    bson_destroy(&info);
    ASSERT_INT_EQ(shl_catalog_coll_mod(eng, "cm.c",
                                       T("{'index': {'name': 'h_1', 'hidden': false}}"), &info,
                                       NULL, &st),
                  0);
    ASSERT_BSON_EQ(&info, "{'hidden_old': true, 'hidden_new': false}");
    bson_destroy(&info);
    c = shl_catalog_get(eng, "cm.c");
    ASSERT_BSON_EQ(shl_collection_find_index(c, "h_1")->spec,
                   "{'v': 2, 'key': {'h': 1}, 'name': 'h_1'}");
    shl_collection_release(c);

    /* Errors leave everything as it was. */
    ASSERT_INT_EQ(shl_catalog_coll_mod(eng, "cm.nope", T("{'validator': {}}"), &info, NULL, &st),
                  SHL_CODE_NAMESPACE_NOT_FOUND);
    bson_destroy(&info);
    ASSERT_INT_EQ(shl_catalog_coll_mod(eng, "cm.c",
                                       T("{'validator': {}, 'index': {'name': 'zz', "
                                         "'hidden': true}}"),
                                       &info, NULL, &st),
                  SHL_CODE_INDEX_NOT_FOUND);
    ASSERT_STR_EQ(st.reason, "cannot find index zz for ns cm.c");
    bson_destroy(&info);
    ASSERT_INT_EQ(shl_catalog_coll_mod(eng, "cm.c",
                                       T("{'index': {'name': '_id_', 'hidden': true}}"), &info,
                                       NULL, &st),
                  SHL_CODE_BAD_VALUE);
    bson_destroy(&info);
    c = shl_catalog_get(eng, "cm.c");
    ASSERT_BSON_EQ(c->options, "{'validator': {'b': 2}, 'validationLevel': 'moderate'}");
    shl_collection_release(c);
    shl_storage_close(eng);
    rmrf(dir);
    bson_free(dir);
    tmp_free();
}

static void
orphan_then_crash(shl_storage_engine_t *eng)
{
    shl_status_t st;
    /* A table WT knows but no durable catalog entry names (a create that never
     * reached the journal looks the same). */
    shl_wt_session_t *s;
    shl_wt_session_get(eng, &s, &st);
    s->wt->create(s->wt, "table:collection-999", "key_format=q,value_format=u");
    shl_wt_session_put(eng, s);
    shl_storage_checkpoint(eng, &st);
}

SHL_TEST(recovery_drops_idents_no_catalog_entry_names)
{
    char *dir = tmpdir();
    shl_storage_engine_t *eng;
    shl_wt_session_t *s;
    WT_CURSOR *c = NULL;
    shl_status_t st;

    crash_after(dir, orphan_then_crash);
    eng = open_eng(dir, false);
    ASSERT(eng != NULL);
    ASSERT_INT_EQ(shl_wt_session_get(eng, &s, &st), 0);
    ASSERT(s->wt->open_cursor(s->wt, "table:collection-999", NULL, NULL, &c) != 0);
    shl_wt_session_put(eng, s);
    /* New idents never reuse a number WT has seen. */
    ASSERT_INT_EQ(shl_catalog_create_collection(eng, "o.c", NULL, NULL, NULL, &st), 0);
    {
        shl_collection_t *coll = shl_catalog_get(eng, "o.c");
        ASSERT_STR_EQ(coll->ident, "collection-1000");
        shl_collection_release(coll);
    }
    shl_storage_close(eng);
    rmrf(dir);
    bson_free(dir);
    tmp_free();
}

/* ---------------------------------------------------------------------------------
 * Batched index builds
 * ------------------------------------------------------------------------------ */

/* Number of table:index-* tables WiredTiger knows. */
static int
count_index_tables(shl_storage_engine_t *eng)
{
    shl_wt_session_t *s = NULL;
    WT_CURSOR *meta = NULL;
    shl_status_t st;
    const char *key;
    int n = 0;

    if (shl_wt_session_get(eng, &s, &st) != 0) {
        return -1;
    }
    if (s->wt->open_cursor(s->wt, "metadata:", NULL, NULL, &meta) == 0) {
        while (meta->next(meta) == 0) {
            if (meta->get_key(meta, &key) == 0 && strncmp(key, "table:index-", 12) == 0) {
                n++;
            }
        }
        meta->close(meta);
    }
    shl_wt_session_put(eng, s);
    return n;
}

/* Entries of index 'name' of 'ns', by a full index scan. */
static int64_t
count_index_entries(shl_storage_engine_t *eng, const char *ns, const char *name)
{
    shl_collection_t *c = shl_catalog_get(eng, ns);
    const shl_index_t *idx = c != NULL ? shl_collection_find_index(c, name) : NULL;
    shl_storage_txn_t *txn = NULL;
    shl_index_cursor_t *cur = NULL;
    shl_key_bound_t none = {NULL, 0};
    shl_status_t st;
    int64_t n = -1;

    if (idx != NULL && shl_storage_txn_begin(eng, NULL, &txn, &st) == 0 &&
        shl_index_cursor_open(txn, idx, &none, &none, true, &cur, &st) == 0) {
        int64_t rid;
        bool eof = false;
        n = 0;
        while (shl_index_cursor_next(cur, &rid, NULL, NULL, &eof, &st) == 0 && !eof) {
            n++;
        }
    }
    shl_index_cursor_close(cur);
    shl_storage_txn_abort(txn);
    shl_collection_release(c);
    return n;
}

static void
fill_build_coll(shl_storage_engine_t *eng, const char *ns, int n)
{
    shl_status_t st;
    shl_catalog_create_collection(eng, ns, NULL, NULL, NULL, &st);
    for (int i = 0; i < n; i++) {
        char json[96];
        if (i == 700) {
            snprintf(json, sizeof(json), "{'_id': %d, 'a': %d, 'm': [1, 2]}", i, i % 500);
        } else {
            snprintf(json, sizeof(json), "{'_id': %d, 'a': %d, 'm': %d}", i, i % 500, i);
        }
        insert_json(eng, ns, json, &st);
    }
}

SHL_TEST(index_build_in_batches)
{
    char *dir = tmpdir();
    shl_storage_engine_t *eng = open_eng(dir, false);
    shl_status_t st;
    bool created = false;
    int64_t before;

    ASSERT(eng != NULL);
    eng->index_build_batch_keys = 100;
    fill_build_coll(eng, "ib.c", 1000);
    before = atomic_load(&eng->index_build_batches);
    ASSERT_INT_EQ(shl_catalog_create_index(eng, "ib.c", T("{'key': {'a': 1}, 'name': 'a_1'}"),
                                           &created, NULL, &st),
                  0);
    ASSERT(created);
    /* 1000 keys in batches of 100 (+ the one that finds the end). */
    ASSERT(atomic_load(&eng->index_build_batches) - before >= 10);
    ASSERT_INT_EQ(count_index_entries(eng, "ib.c", "a_1"), 1000);
    ASSERT_INT_EQ(shl_catalog_create_index(eng, "ib.c", T("{'key': {'m': 1}, 'name': 'm_1'}"),
                                           &created, NULL, &st),
                  0);
    ASSERT_INT_EQ(count_index_entries(eng, "ib.c", "m_1"), 1001);
    ASSERT(is_multikey(eng, "ib.c", "m_1"));
    ASSERT(!is_multikey(eng, "ib.c", "a_1"));
    /* A duplicate found in a later batch fails the build and leaves no index behind. */
    ASSERT_INT_EQ(shl_catalog_create_index(eng, "ib.c",
                                           T("{'key': {'a': 1}, 'name': 'a_u', 'unique': true}"),
                                           &created, NULL, &st),
                  SHL_CODE_DUPLICATE_KEY);
    ASSERT(strstr(st.reason, "dup key: { a: 0 }") != NULL);
    ASSERT_INT_EQ(count_index_entries(eng, "ib.c", "a_u"), -1);
    ASSERT_INT_EQ(shl_storage_checkpoint(eng, &st), 0);
    ASSERT_INT_EQ(count_index_tables(eng), 3); /* _id_, a_1, m_1 */
    /* Writes after the build maintain the index. */
    ASSERT_INT_EQ(insert_json(eng, "ib.c", "{'_id': 'x', 'a': 1}", &st), 0);
    ASSERT_INT_EQ(count_index_entries(eng, "ib.c", "a_1"), 1001);
    shl_storage_close(eng);
    /* And everything is there after a restart. */
    eng = open_eng(dir, false);
    ASSERT_INT_EQ(count_index_entries(eng, "ib.c", "a_1"), 1001);
    ASSERT_INT_EQ(count_index_entries(eng, "ib.c", "m_1"), 1002);
    shl_storage_close(eng);
    rmrf(dir);
    bson_free(dir);
    tmp_free();
}

static void
checkpoint_then_die(shl_storage_engine_t *eng, int64_t batch)
{
    shl_status_t st;
    if (batch == 3) {
        /* Batches so far are in a stable checkpoint; the build never finishes. */
        shl_storage_checkpoint(eng, &st);
        raise(SIGKILL);
    }
}

static void
build_then_crash(shl_storage_engine_t *eng)
{
    shl_status_t st;
    bool created;
    eng->index_build_batch_keys = 100;
    fill_build_coll(eng, "ic.c", 1000);
    shl_storage_checkpoint(eng, &st);
    eng->index_build_hook = checkpoint_then_die;
    shl_catalog_create_index(eng, "ic.c", T("{'key': {'a': 1}, 'name': 'a_1'}"), &created, NULL,
                             &st);
}

SHL_TEST(index_build_interrupted_by_crash_leaves_no_index)
{
    char *dir = tmpdir();
    shl_storage_engine_t *eng;
    shl_collection_t *c;
    shl_status_t st;
    bool created = false;

    /* One pinned wall second for both processes: the restarted clock must then start
     * above the stable batch timestamps by itself (they have no oplog entries). */
    shl_clock_set_fake_wall_ms(shl_clock_wall_ms());
    crash_after(dir, build_then_crash);
    eng = open_eng(dir, false);
    ASSERT(eng != NULL);
    c = shl_catalog_get(eng, "ic.c");
    ASSERT(c != NULL);
    ASSERT_INT_EQ(c->nindexes, 1);
    shl_collection_release(c);
    /* Recovery dropped the half-built table: only the _id index's is left. */
    ASSERT_INT_EQ(count_index_tables(eng), 1);
    ASSERT_INT_EQ(shl_catalog_create_index(eng, "ic.c", T("{'key': {'a': 1}, 'name': 'a_1'}"),
                                           &created, NULL, &st),
                  0);
    ASSERT_INT_EQ(count_index_entries(eng, "ic.c", "a_1"), 1000);
    /* The crashed build had taken index-3 (so it really ran); idents never repeat. */
    c = shl_catalog_get(eng, "ic.c");
    ASSERT_STR_EQ(shl_collection_find_index(c, "a_1")->ident, "index-4");
    shl_collection_release(c);
    shl_storage_close(eng);
    shl_clock_set_fake_wall_ms(0);
    rmrf(dir);
    bson_free(dir);
    tmp_free();
}

/* ---------------------------------------------------------------------------------
 * Crash loop: a child writes until SIGKILL, the parent reopens and checks.
 * ------------------------------------------------------------------------------ */

#define CRASH_RANGE 1000000

typedef struct crash_ack {
    int64_t seq;     /* op number in the round's deterministic sequence */
    int32_t durable; /* waited for the journal */
    int32_t pad;
    int64_t mono_us; /* when the child saw the ack */
} crash_ack_t;

typedef struct crash_op {
    char kind; /* 'i' insert, 'u' update, 'd' delete, 'C' create coll, 'X' create index,
                  'D' drop previous round's coll, 'B' batch insert into the round's coll */
    int64_t id;
} crash_op_t;

/* Op k of round r's sequence (deterministic so the parent can model it). */
static size_t
crash_ops(int round, int64_t nids, crash_op_t *ops, size_t max)
{
    size_t n = 0;
    int64_t base = (int64_t)round * CRASH_RANGE;
    for (int64_t i = base; i < base + nids && n + 4 < max; i++) {
        ops[n++] = (crash_op_t){'i', i};
        if ((i - base) % 7 == 6) {
            ops[n++] = (crash_op_t){'u', i - 3};
        }
        if ((i - base) % 11 == 10) {
            ops[n++] = (crash_op_t){'d', i - 5};
        }
        if (i - base == 20) {
            ops[n++] = (crash_op_t){'C', i};
        }
        if (i - base == 40) {
            ops[n++] = (crash_op_t){'X', i};
        }
        if (i - base == 50) {
            ops[n++] = (crash_op_t){'B', i};
        }
        if (i - base == 60 && round > 0) {
            ops[n++] = (crash_op_t){'D', i};
        }
    }
    return n;
}

typedef struct crash_upd {
    shl_collection_t *coll;
    int64_t id;
    char kind;
    int round;
} crash_upd_t;

static int
crash_write_fn(shl_storage_txn_t *txn, void *arg, shl_status_t *st)
{
    crash_upd_t *u = arg;
    bson_value_t idv = {.value_type = BSON_TYPE_INT64, .value.v_int64 = u->id};
    bson_t cur, *doc = NULL;
    int64_t rid;
    bool found;
    int ret = 0;

    bson_init(&cur);
    if (u->kind == 'i') {
        doc = BCON_NEW("_id", BCON_INT64(u->id), "a", BCON_INT64(u->id), "r", BCON_INT32(u->round),
                       "pad", BCON_UTF8("................................................"));
        ret = shl_doc_insert(txn, u->coll, doc, NULL, NULL, st);
    } else if (u->kind == 'B') {
        for (int k = 0; k < 5 && ret == 0; k++) {
            doc = BCON_NEW("_id", BCON_INT32(k), "b", BCON_INT32(k));
            ret = shl_doc_insert(txn, u->coll, doc, NULL, NULL, st);
            bson_destroy(doc);
            doc = NULL;
        }
    } else {
        bson_destroy(&cur);
        ret = shl_doc_find_by_id(txn, u->coll, &idv, &cur, &rid, &found, st);
        if (ret == 0 && !found) {
            ret = shl_status_set(st, SHL_CODE_NO_SUCH_KEY, "missing %lld", (long long)u->id);
        }
        if (ret == 0 && u->kind == 'u') {
            doc = BCON_NEW("_id", BCON_INT64(u->id), "a", BCON_INT64(-u->id), "r",
                           BCON_INT32(u->round), "upd", BCON_BOOL(true));
            ret = shl_doc_update(txn, u->coll, rid, &cur, doc, NULL, st);
        } else if (ret == 0) {
            ret = shl_doc_delete(txn, u->coll, rid, &cur, NULL, st);
        }
    }
    bson_destroy(&cur);
    if (doc != NULL) {
        bson_destroy(doc);
    }
    return ret;
}

static void
crash_child(const char *dir, int round, bool j, int fd)
{
    shl_storage_engine_t *eng = open_eng(dir, true);
    shl_status_t st;
    char ns[64], prev[64];
    crash_op_t *ops = bson_malloc(sizeof(crash_op_t) * 400000);
    size_t n = crash_ops(round, 60000, ops, 400000);

    if (eng == NULL) {
        _exit(2);
    }
    snprintf(ns, sizeof(ns), "crash.r%d", round);
    snprintf(prev, sizeof(prev), "crash.r%d", round - 1);
    if (round == 0) {
        shl_catalog_create_collection(eng, "crash.c", NULL, NULL, NULL, &st);
        shl_catalog_create_index(eng, "crash.c", T("{'key': {'a': 1}, 'name': 'a_1'}"), NULL, NULL,
                                 &st);
        shl_storage_wait_durable(eng, shl_storage_clock_now(eng), &st);
    }
    for (size_t k = 0; k < n; k++) {
        crash_op_t op = ops[k];
        crash_ack_t ack = {.seq = (int64_t)k, .durable = j};
        uint64_t ts = 0;
        int ret = 0;
        if (op.kind == 'C') {
            ret = shl_catalog_create_collection(eng, ns, NULL, NULL, &ts, &st);
        } else if (op.kind == 'X') {
            ret = shl_catalog_create_index(eng, ns,
                                           T("{'key': {'b': 1}, 'name': "
                                             "'b_1'}"),
                                           NULL, &ts, &st);
        } else if (op.kind == 'D') {
            ret = shl_catalog_drop_collection(eng, prev, &ts, &st);
        } else {
            shl_coll_handle_t h;
            crash_upd_t u = {.id = op.id, .kind = op.kind, .round = round};
            shl_storage_coll_acquire(eng, op.kind == 'B' ? ns : "crash.c", SHL_LOCK_SHARED, &h,
                                     &st);
            u.coll = h.coll;
            ret = u.coll == NULL ? SHL_CODE_NAMESPACE_NOT_FOUND
                                 : shl_storage_write_retry(eng, crash_write_fn, &u, &ts, &st);
            shl_storage_coll_release(&h);
        }
        if (ret != 0) {
            fprintf(stderr, "crash child: op %zu (%c %lld) failed: %s\n", k, op.kind,
                    (long long)op.id, st.reason);
            _exit(3);
        }
        if (j && shl_storage_wait_durable(eng, ts, &st) != 0) {
            _exit(4);
        }
        ack.mono_us = shl_clock_mono_us();
        if (write(fd, &ack, sizeof(ack)) != sizeof(ack)) {
            _exit(5);
        }
        if (!j && k % 100 == 99) {
            shl_sleep_ms(5); /* keep it writing until the kill */
        }
    }
    _exit(0);
}

/* Check the reopened database against the deterministic op sequence of 'round'. */
static int
crash_verify(shl_storage_engine_t *eng, int round, int64_t min_ops, int64_t max_ops, int64_t *out_l)
{
    crash_op_t *ops = bson_malloc(sizeof(crash_op_t) * 400000);
    size_t nops = crash_ops(round, 60000, ops, 400000);
    int64_t base = (int64_t)round * CRASH_RANGE;
    bson_t *e;
    size_t n = read_oplog(eng, 0, &e);
    int64_t l = 0;
    bool saw_create = false, saw_index = false, saw_drop = false, saw_batch = false;
    int8_t *state = bson_malloc0(100000);
    shl_collection_t *c = shl_catalog_get(eng, "crash.c");
    shl_storage_txn_t *txn;
    shl_record_cursor_t *rc;
    shl_status_t st;
    char rns[64];
    int bad = 0;
    int64_t docs_in_round = 0, expect_docs = 0;

    /* L = this round's ops that reached the oplog (each op is one entry, 'B' five). */
    for (size_t i = 0; i < n; i++) {
        bson_iter_t it;
        const char *ns = NULL;
        int64_t id = -1;
        if (bson_iter_init_find(&it, &e[i], "ns")) {
            ns = bson_iter_utf8(&it, NULL);
        }
        if (ns != NULL && strcmp(ns, "crash.c") == 0 &&
            (bson_iter_init_find(&it, &e[i], "o2") || bson_iter_init_find(&it, &e[i], "o"))) {
            bson_iter_t sub;
            if (bson_iter_recurse(&it, &sub) && bson_iter_find(&sub, "_id")) {
                id = bson_iter_as_int64(&sub);
            }
            if (id >= base && id < base + CRASH_RANGE) {
                l++;
            }
        }
        snprintf(rns, sizeof(rns), "crash.r%d", round);
        if (ns != NULL && strcmp(ns, rns) == 0) {
            saw_batch = true;
        }
        if (ns != NULL && strcmp(ns, "crash.$cmd") == 0 && bson_iter_init_find(&it, &e[i], "o")) {
            char *j = bson_as_relaxed_extended_json(&e[i], NULL);
            char want_c[64], want_x[64], want_d[64];
            snprintf(want_c, sizeof(want_c), "\"create\" : \"r%d\"", round);
            snprintf(want_x, sizeof(want_x), "\"createIndexes\" : \"r%d\"", round);
            snprintf(want_d, sizeof(want_d), "\"drop\" : \"r%d\"", round - 1);
            saw_create |= strstr(j, want_c) != NULL;
            saw_index |= strstr(j, want_x) != NULL;
            saw_drop |= round > 0 && strstr(j, want_d) != NULL;
            bson_free(j);
        }
    }
    /* Ops that are not crash.c entries count toward the prefix too. */
    {
        int64_t crud = 0, k = 0;
        for (; k < (int64_t)nops && crud < l; k++) {
            if (strchr("iud", ops[k].kind) != NULL) {
                crud++;
            }
        }
        /* The prefix ends after the l-th CRUD op; the DDL and batch ops right after it are
         * in when their entries are (the last acknowledged op may be one of them). */
        while (k < (int64_t)nops && strchr("iud", ops[k].kind) == NULL &&
               (ops[k].kind == 'C'   ? saw_create
                : ops[k].kind == 'X' ? saw_index
                : ops[k].kind == 'B' ? saw_batch
                                     : saw_drop)) {
            k++;
        }
        *out_l = k;
        if (k < min_ops) {
            fprintf(stderr, "round %d: recovered %lld ops < %lld acknowledged durable\n", round,
                    (long long)k, (long long)min_ops);
            bad++;
        }
        if (k > max_ops + 1) {
            fprintf(stderr, "round %d: recovered %lld ops > %lld acknowledged + 1\n", round,
                    (long long)k, (long long)max_ops);
            bad++;
        }
        for (int64_t q = 0; q < k; q++) {
            int64_t idx = ops[q].id - base;
            if (ops[q].kind == 'i') {
                state[idx] = 1;
            } else if (ops[q].kind == 'u') {
                state[idx] = 2;
            } else if (ops[q].kind == 'd') {
                state[idx] = 0;
            }
        }
        for (int64_t q = 0; q < 100000; q++) {
            expect_docs += state[q] != 0;
        }
        /* DDL: present in the catalog exactly when its oplog entry is. */
        snprintf(rns, sizeof(rns), "crash.r%d", round);
        {
            shl_collection_t *r = shl_catalog_get(eng, rns);
            if ((r != NULL) != (saw_create && !false)) {
                fprintf(stderr, "round %d: %s in catalog %d, create in oplog %d\n", round, rns,
                        r != NULL, saw_create);
                bad++;
            }
            if (r != NULL && (r->nindexes == 2) != saw_index) {
                fprintf(stderr, "round %d: index b_1 %zu vs oplog %d\n", round, r->nindexes,
                        saw_index);
                bad++;
            }
            if (r != NULL && shl_collection_num_records(r) != (saw_batch ? 5 : 0)) {
                fprintf(stderr, "round %d: batch docs %lld vs oplog %d\n", round,
                        (long long)shl_collection_num_records(r), saw_batch);
                bad++;
            }
            shl_collection_release(r);
        }
        if (round > 0) {
            char pns[64];
            shl_collection_t *p;
            snprintf(pns, sizeof(pns), "crash.r%d", round - 1);
            p = shl_catalog_get(eng, pns);
            if (saw_drop && p != NULL) {
                fprintf(stderr, "round %d: %s dropped in oplog but in catalog\n", round, pns);
                bad++;
            }
            shl_collection_release(p);
        }
    }
    /* Documents: exactly the model's, each with its _id and a_1 index entries. */
    shl_storage_txn_begin(eng, NULL, &txn, &st);
    shl_record_cursor_open(txn, c, true, &rc, &st);
    for (;;) {
        int64_t rid, id, a;
        bson_t doc;
        bool eof, found;
        bson_iter_t it;
        shl_keyset_t keys;
        if (shl_record_cursor_next(rc, &rid, &doc, &eof, &st) != 0 || eof) {
            break;
        }
        bson_iter_init_find(&it, &doc, "_id");
        id = bson_iter_as_int64(&it);
        bson_iter_init_find(&it, &doc, "a");
        a = bson_iter_as_int64(&it);
        if (id < base || id >= base + CRASH_RANGE) {
            continue;
        }
        docs_in_round++;
        if (state[id - base] == 0 || (state[id - base] == 1 && a != id) ||
            (state[id - base] == 2 && a != -id)) {
            fprintf(stderr, "round %d: doc %lld has a=%lld, model state %d\n", round, (long long)id,
                    (long long)a, state[id - base]);
            bad++;
        }
        shl_keyset_init(&keys);
        for (size_t x = 0; x < c->nindexes; x++) {
            int64_t irid = -1;
            size_t len;
            const uint8_t *k;
            shl_index_keys_for_doc(c->indexes[x], &doc, &keys, &st);
            k = shl_keyset_key(&keys, 0, &len);
            shl_index_lookup(txn, c->indexes[x], k, len, &irid, &found, &st);
            if (!found || irid != rid) {
                fprintf(stderr, "round %d: doc %lld missing from index %s\n", round, (long long)id,
                        c->indexes[x]->name);
                bad++;
            }
        }
        shl_keyset_cleanup(&keys);
    }
    shl_record_cursor_close(rc);
    /* Index entries: no more than documents (none left behind by deletes). */
    for (size_t x = 0; x < c->nindexes; x++) {
        shl_index_cursor_t *ic;
        int64_t count = 0, rid;
        bool eof;
        shl_index_cursor_open(txn, c->indexes[x], NULL, NULL, true, &ic, &st);
        while (shl_index_cursor_next(ic, &rid, NULL, NULL, &eof, &st) == 0 && !eof) {
            count++;
        }
        shl_index_cursor_close(ic);
        if (count != shl_collection_num_records(c)) {
            fprintf(stderr, "round %d: index %s has %lld entries for %lld documents\n", round,
                    c->indexes[x]->name, (long long)count,
                    (long long)shl_collection_num_records(c));
            bad++;
        }
    }
    shl_storage_txn_abort(txn);
    if (docs_in_round != expect_docs) {
        fprintf(stderr, "round %d: %lld documents, model says %lld\n", round,
                (long long)docs_in_round, (long long)expect_docs);
        bad++;
    }
    shl_collection_release(c);
    free_docs(e, n);
    bson_free(state);
    bson_free(ops);
    return bad;
}

SHL_TEST(crash_loop_kill9_durability_and_atomicity)
{
    char *dir = tmpdir();
    unsigned seed = (unsigned)shl_clock_mono_us();
    const int rounds = 6;
    const int64_t max_acks = 400000;
    crash_ack_t *acks = bson_malloc(max_acks * sizeof(crash_ack_t));

    fprintf(stderr, "  (seed %u)\n", seed);
    srandom(seed);
    for (int round = 0; round < rounds; round++) {
        bool j = round % 2 == 0;
        int fds[2];
        pid_t pid;
        crash_ack_t ack;
        int64_t first_us = 0, kill_us, acked = 0, durable_min = 0, delay_us;
        int64_t l = 0, nacks = 0;
        shl_storage_engine_t *eng;
        int bad;

        ASSERT(pipe(fds) == 0);
        pid = fork();
        if (pid == 0) {
            close(fds[0]);
            crash_child(dir, round, j, fds[1]);
        }
        close(fds[1]);
        /* Let it run a random while after its first acknowledged write: 0.2-1 s, and
         * at least 0.7 s without j so some acks are older than the 500 ms margin. */
        delay_us = (j ? 200000 : 700000) + random() % 700000;
        for (;;) {
            ssize_t r = read(fds[0], &ack, sizeof(ack));
            if (r != sizeof(ack)) {
                break;
            }
            if (first_us == 0) {
                first_us = ack.mono_us;
            }
            acks[nacks++] = ack;
            if (ack.mono_us - first_us > delay_us || nacks == max_acks) {
                break;
            }
        }
        kill(pid, SIGKILL);
        kill_us = shl_clock_mono_us();
        /* Acks written before the kill are still in the pipe. */
        while (nacks < max_acks && read(fds[0], &ack, sizeof(ack)) == sizeof(ack)) {
            acks[nacks++] = ack;
        }
        /* j:true acks must survive; j:false ones too once the journal flusher
         * (every 100 ms) has had 5 intervals to write them. */
        for (int64_t i = 0; i < nacks; i++) {
            acked = acks[i].seq + 1;
            if (acks[i].durable || acks[i].mono_us < kill_us - 500000) {
                durable_min = acks[i].seq + 1;
            }
        }
        close(fds[0]);
        waitpid(pid, NULL, 0);
        ASSERT(acked > 0);

        eng = open_eng(dir, false);
        ASSERT(eng != NULL);
        bad = crash_verify(eng, round, durable_min, acked, &l);
        fprintf(stderr,
                "  round %d (%s): %lld ops acknowledged, %lld must survive, %lld "
                "recovered\n",
                round, j ? "j:true" : "j:false", (long long)acked, (long long)durable_min,
                (long long)l);
        shl_storage_close(eng);
        ASSERT_INT_EQ(bad, 0);
    }
    bson_free(acks);
    rmrf(dir);
    bson_free(dir);
    tmp_free();
}

SHL_TEST(drop_waits_for_checkpoint_and_open_cursors)
{
    char *dir = tmpdir();
    shl_storage_engine_t *eng = open_eng(dir, false);
    shl_storage_txn_t *txn;
    shl_record_cursor_t *rc;
    shl_collection_t *c;
    shl_status_t st;
    char *path;
    int64_t rid;
    bson_t doc;
    bool eof;

    ASSERT(eng != NULL);
    ASSERT_INT_EQ(shl_catalog_create_collection(eng, "dr.c", NULL, NULL, NULL, &st), 0);
    ASSERT_INT_EQ(insert_json(eng, "dr.c", "{'_id': 1}", &st), 0);
    ASSERT_INT_EQ(insert_json(eng, "dr.c", "{'_id': 2}", &st), 0);
    c = shl_catalog_get(eng, "dr.c");
    path = bson_strdup_printf("%s/%s.wt", dir, c->ident);
    /* A reader holds a snapshot and a positioned cursor (a cursor between getMores). */
    ASSERT_INT_EQ(shl_storage_txn_begin(eng, NULL, &txn, &st), 0);
    ASSERT_INT_EQ(shl_record_cursor_open(txn, c, true, &rc, &st), 0);
    ASSERT_INT_EQ(shl_record_cursor_next(rc, &rid, &doc, &eof, &st), 0);
    ASSERT_INT_EQ(shl_catalog_drop_collection(eng, "dr.c", NULL, &st), 0);
    ASSERT(shl_catalog_get(eng, "dr.c") == NULL);
    /* The table outlives the drop until a checkpoint covers it and no cursor has it. */
    ASSERT(access(path, F_OK) == 0);
    ASSERT_INT_EQ(shl_storage_checkpoint(eng, &st), 0);
    ASSERT(access(path, F_OK) == 0);
    ASSERT_INT_EQ(shl_record_cursor_next(rc, &rid, &doc, &eof, &st), 0);
    ASSERT(!eof && rid == 2);
    shl_record_cursor_close(rc);
    shl_storage_txn_abort(txn);
    ASSERT_INT_EQ(shl_storage_checkpoint(eng, &st), 0);
    ASSERT(access(path, F_OK) != 0);
    shl_collection_release(c);
    shl_storage_close(eng);
    bson_free(path);
    rmrf(dir);
    bson_free(dir);
    tmp_free();
}


/* The live entries of index 'i' of 'ns': their count *n, and the RecordId of the first. */
static void
index_entries(shl_storage_engine_t *eng, const char *ns, size_t i, size_t *count, int64_t *first)
{
    shl_collection_t *c = shl_catalog_get(eng, ns);
    shl_storage_txn_t *txn = NULL;
    shl_index_cursor_t *ic = NULL;
    shl_status_t st;
    size_t n = 0;

    *first = 0;
    ASSERT(c != NULL && i < c->nindexes);
    ASSERT_INT_EQ(shl_storage_txn_begin(eng, NULL, &txn, &st), 0);
    ASSERT_INT_EQ(shl_index_cursor_open(txn, c->indexes[i], NULL, NULL, true, &ic, &st), 0);
    for (;;) {
        int64_t rid;
        bool eof = false;
        ASSERT_INT_EQ(shl_index_cursor_next(ic, &rid, NULL, NULL, &eof, &st), 0);
        if (eof) {
            break;
        }
        if (n++ == 0) {
            *first = rid;
        }
    }
    shl_index_cursor_close(ic);
    shl_storage_txn_abort(txn);
    shl_collection_release(c);
    *count = n;
}

/* The timestamp of the last derived_write. */
static uint64_t derived_ts;

/* One derived write of 'doc' into 'ns' with RecordId hint *rid, committed (its timestamp into
 * derived_ts). */
static void
derived_write(shl_storage_engine_t *eng, const char *ns, const bson_t *doc, int64_t *rid)
{
    shl_collection_t *c = shl_catalog_get(eng, ns);
    shl_storage_txn_t *txn = NULL;
    shl_status_t st;
    uint64_t ts;

    ASSERT(c != NULL);
    ASSERT_INT_EQ(shl_storage_txn_begin(eng, NULL, &txn, &st), 0);
    ASSERT_INT_EQ(shl_storage_txn_tick(txn, &ts, &st), 0);
    ASSERT_INT_EQ(shl_doc_upsert_derived(txn, c, doc, rid, &st), 0);
    ASSERT_INT_EQ(shl_storage_txn_commit(txn, &st), 0);
    shl_collection_release(c);
    derived_ts = ts;
}

/* A versioned collection (config.transactions' layout): a version is rewritten in place at
 * most 48 times (SHL_VERSION_IN_PLACE_MAX), then the next write is a new record and a new _id
 * entry and the old ones are removed, and a lookup finds the newest. */
SHL_TEST(versioned_collection_writes_each_version_under_a_new_key)
{
    char *dir = tmpdir();
    shl_storage_engine_t *eng = open_eng(dir, false);
    bson_value_t sid = {.value_type = BSON_TYPE_INT32, .value.v_int32 = 7};
    shl_storage_txn_t *txn = NULL;
    shl_collection_t *c;
    shl_status_t st;
    int64_t rid = 0, prev, first, got_rid = 0;
    size_t nent = 0;
    int in_place = 0, moves = 0;
    bson_t got;
    bool found;

    ASSERT(eng != NULL);
    ASSERT_INT_EQ(shl_catalog_create_collection(eng, "config.transactions",
                                                T("{'versionedRecords': true}"), NULL, NULL, &st),
                  0);
    c = shl_catalog_get(eng, "config.transactions");
    ASSERT(shl_collection_versioned(c) && c->indexes[0]->unique && c->indexes[0]->rid_suffix);
    /* Not one of the options users see. */
    ASSERT_BSON_EQ(c->options, "{}");
    shl_collection_release(c);
    derived_write(eng, "config.transactions", T("{'_id': 7, 'n': 0}"), &rid);
    derived_write(eng, "config.transactions", T("{'_id': 8, 'n': 0}"), &(int64_t){0});
    ASSERT(rid != 0);
    for (int i = 1; i <= 2000; i++) {
        bson_t *doc = BCON_NEW("_id", BCON_INT32(7), "n", BCON_INT32(i));
        prev = rid;
        /* Every 100th write without the hint: found through the _id index. */
        if (i % 100 == 0) {
            rid = 0;
        }
        derived_write(eng, "config.transactions", doc, &rid);
        bson_destroy(doc);
        if (rid == prev) {
            /* Rewritten in place: 48 times at most, and never without the hint. */
            ASSERT(++in_place <= 48 && i % 100 != 0);
            continue;
        }
        ASSERT(rid > prev);
        ASSERT(in_place == 48 || i % 100 == 0 || i == 1);
        in_place = 0;
        moves++;
        /* Moved: the old record is gone, the new one holds the document. */
        c = shl_catalog_get(eng, "config.transactions");
        ASSERT_INT_EQ(shl_storage_txn_begin(eng, NULL, &txn, &st), 0);
        ASSERT_INT_EQ(shl_record_get(txn, c, prev, &got, &found, &st), 0);
        ASSERT(!found);
        bson_destroy(&got);
        shl_storage_txn_abort(txn);
        shl_collection_release(c);
    }
    ASSERT(moves >= 2000 / 49 && moves <= 2000 / 49 + 21);
    /* One record and one _id entry per document; the lookup returns the newest. */
    ASSERT_SCAN(eng, "config.transactions", true,
                "[{ \"_id\" : 8, \"n\" : 0 }, { \"_id\" : 7, \"n\" : 2000 }]");
    index_entries(eng, "config.transactions", 0, &nent, &first);
    ASSERT_INT_EQ(nent, 2);
    c = shl_catalog_get(eng, "config.transactions");
    ASSERT_INT_EQ(shl_collection_num_records(c), 2);
    ASSERT_INT_EQ(shl_storage_txn_begin(eng, NULL, &txn, &st), 0);
    ASSERT_INT_EQ(shl_doc_find_by_id(txn, c, &sid, &got, &got_rid, &found, &st), 0);
    ASSERT(found && got_rid == rid);
    ASSERT_BSON_EQ(&got, "{'_id': 7, 'n': 2000}");
    bson_destroy(&got);
    /* Still unique for ordinary inserts. */
    ASSERT_INT_EQ(shl_doc_insert(txn, c, T("{'_id': 7}"), NULL, NULL, &st),
                  SHL_CODE_DUPLICATE_KEY);
    shl_status_clear(&st);
    ASSERT_INT_EQ(shl_doc_insert(txn, c, T("{'_id': 9}"), NULL, NULL, &st), 0);
    ASSERT_INT_EQ(shl_storage_txn_commit(txn, &st), 0);
    shl_collection_release(c);

    /* The layout survives a restart (catalog entry), and so does the newest version. */
    shl_storage_close(eng);
    eng = open_eng(dir, false);
    ASSERT(eng != NULL);
    c = shl_catalog_get(eng, "config.transactions");
    ASSERT(c != NULL && shl_collection_versioned(c));
    ASSERT_INT_EQ(shl_storage_txn_begin(eng, NULL, &txn, &st), 0);
    ASSERT_INT_EQ(shl_doc_find_by_id(txn, c, &sid, &got, &got_rid, &found, &st), 0);
    ASSERT(found && got_rid == rid);
    ASSERT_BSON_EQ(&got, "{'_id': 7, 'n': 2000}");
    bson_destroy(&got);
    shl_storage_txn_abort(txn);
    shl_collection_release(c);
    prev = rid;
    rid = 0;
    derived_write(eng, "config.transactions", T("{'_id': 7, 'n': 2001}"), &rid);
    ASSERT(rid > prev);
    index_entries(eng, "config.transactions", 0, &nent, &first);
    ASSERT_INT_EQ(nent, 3);
    shl_storage_close(eng);
    rmrf(dir);
    bson_free(dir);
    tmp_free();
}

/* A versioned collection keeps snapshot reads right: a read at the timestamp of any earlier
 * write -- one rewritten in place since, or moved to another key since -- finds that write's
 * version through the _id index, and the latest read the newest. */
SHL_TEST(versioned_collection_snapshot_reads_see_each_version)
{
    char *dir = tmpdir();
    shl_storage_engine_t *eng = open_eng(dir, false);
    bson_value_t sid = {.value_type = BSON_TYPE_INT32, .value.v_int32 = 7};
    enum { WRITES = 120 }; /* more than two moves (one write in 49 moves the key) */
    uint64_t ts[WRITES];
    int64_t rid = 0, rids[WRITES];
    shl_storage_txn_t *txn = NULL;
    shl_collection_t *c;
    shl_status_t st;
    int moves = 0;

    ASSERT(eng != NULL);
    ASSERT_INT_EQ(shl_catalog_create_collection(eng, "config.transactions",
                                                T("{'versionedRecords': true}"), NULL, NULL, &st),
                  0);
    for (int i = 0; i < WRITES; i++) {
        bson_t *doc = BCON_NEW("_id", BCON_INT32(7), "n", BCON_INT32(i));
        derived_write(eng, "config.transactions", doc, &rid);
        ts[i] = derived_ts;
        rids[i] = rid;
        moves += i > 0 && rids[i] != rids[i - 1];
        bson_destroy(doc);
    }
    ASSERT(moves >= 2);
    c = shl_catalog_get(eng, "config.transactions");
    for (int i = 0; i <= WRITES; i++) {
        shl_storage_txn_opts_t o = {.read_timestamp = i < WRITES ? ts[i] : 0};
        int64_t got_rid = 0;
        bool found = false;
        bson_t got;
        ASSERT_INT_EQ(shl_storage_txn_begin(eng, i < WRITES ? &o : NULL, &txn, &st), 0);
        ASSERT_INT_EQ(shl_doc_find_by_id(txn, c, &sid, &got, &got_rid, &found, &st), 0);
        ASSERT(found && got_rid == rids[i < WRITES ? i : WRITES - 1]);
        ASSERT_INT_EQ(shl_bson_int64_at(&got, "n"), i < WRITES ? i : WRITES - 1);
        bson_destroy(&got);
        shl_storage_txn_abort(txn);
    }
    shl_collection_release(c);
    shl_storage_close(eng);
    rmrf(dir);
    bson_free(dir);
    tmp_free();
}

/* The session's cursor cache: a cursor given back refills the slot its URI keeps (no new
 * slot per use), two cursors of one URI may be out at once, and a drop of the table closes
 * the cached ones (shl_wt_cursor_get / _put). */
SHL_TEST(cursor_cache_reuses_a_slot_per_uri)
{
    char *dir = tmpdir();
    shl_storage_engine_t *eng = open_eng(dir, false);
    shl_collection_t *coll;
    shl_wt_session_t *s = NULL;
    WT_CURSOR *a = NULL, *b = NULL, *again = NULL;
    shl_status_t st;
    size_t n;
    char *uri;

    ASSERT_INT_EQ(shl_catalog_create_collection(eng, "cc.c", NULL, NULL, NULL, &st), 0);
    coll = shl_catalog_get(eng, "cc.c");
    ASSERT(coll != NULL);
    uri = bson_strdup(coll->uri);
    shl_collection_release(coll);
    ASSERT_INT_EQ(shl_wt_session_get(eng, &s, &st), 0);
    n = s->ncache;
    ASSERT_INT_EQ(shl_wt_cursor_get(eng, s, uri, &a, &st), 0);
    shl_wt_cursor_put(s, uri, a);
    ASSERT_INT_EQ(s->ncache, n + 1);
    for (int i = 0; i < 100; i++) { /* the same cursor back and forth, one slot */
        ASSERT_INT_EQ(shl_wt_cursor_get(eng, s, uri, &again, &st), 0);
        ASSERT(again == a);
        shl_wt_cursor_put(s, uri, again);
    }
    ASSERT_INT_EQ(s->ncache, n + 1);
    /* Two out at once: the second is a new cursor; both come back, the cache has both. */
    ASSERT_INT_EQ(shl_wt_cursor_get(eng, s, uri, &a, &st), 0);
    ASSERT_INT_EQ(shl_wt_cursor_get(eng, s, uri, &b, &st), 0);
    ASSERT(a != b);
    shl_wt_cursor_put(s, uri, b);
    shl_wt_cursor_put(s, uri, a);
    ASSERT_INT_EQ(s->ncache, n + 2);
    ASSERT_INT_EQ(shl_wt_cursor_get(eng, s, uri, &again, &st), 0);
    ASSERT(again == a || again == b);
    shl_wt_cursor_put(s, uri, again);
    shl_wt_session_put(eng, s);
    /* The drop finds the cached cursors and closes them (it would fail with EBUSY). */
    ASSERT_INT_EQ(shl_catalog_drop_collection(eng, "cc.c", NULL, &st), 0);
    ASSERT(shl_catalog_get(eng, "cc.c") == NULL);
    bson_free(uri);
    shl_storage_close(eng);
    rmrf(dir);
    bson_free(dir);
    tmp_free();
}

/* A member's own state in _local, stored and then the process crashes (no checkpoint). */
static void
local_docs_then_crash(shl_storage_engine_t *eng)
{
    shl_status_t st;
    if (shl_local_doc_store(eng, "local.replset.election", T("{'_id': 'election', 'term': 3}"),
                            &st) != 0 ||
        shl_local_doc_store(eng, "local.replset.election", T("{'_id': 'election', 'term': 4}"),
                            &st) != 0) {
        _exit(3);
    }
    tmp_free();
}

SHL_TEST(local_docs_are_durable_without_checkpoint_or_oplog_entry)
{
    char *dir = tmpdir();
    shl_storage_engine_t *eng;
    shl_status_t st;
    bson_t doc;
    bool found = true;
    uint64_t top = 0;

    crash_after(dir, local_docs_then_crash);
    eng = open_eng(dir, false);
    ASSERT(eng != NULL);
    ASSERT_INT_EQ(shl_local_doc_load(eng, "local.replset.election", "election", &doc, &found,
                                     &st), 0);
    ASSERT(found);
    ASSERT_BSON_EQ(&doc, "{'_id': 'election', 'term': 4}");
    bson_destroy(&doc);
    ASSERT_INT_EQ(shl_local_doc_load(eng, "local.replset.minvalid", "election", &doc, &found,
                                     &st), 0);
    ASSERT(!found);
    bson_destroy(&doc);
    /* No oplog entry, no collection. */
    ASSERT_INT_EQ(shl_oplog_top(eng, &top, &st), 0);
    ASSERT_INT_EQ(top, 0);
    ASSERT(shl_catalog_get(eng, "local.replset.election") == NULL);
    ASSERT_INT_EQ(shl_local_doc_store(eng, "local.x", T("{'_id': 1}"), &st), SHL_CODE_BAD_VALUE);
    shl_storage_close(eng);
    tmp_free();
    rmrf(dir);
    bson_free(dir);
}

SHL_TEST(replayed_create_of_an_existing_collection_leaves_no_error)
{
    char *dir = tmpdir();
    shl_storage_engine_t *eng = open_eng(dir, false);
    shl_status_t st;
    uint64_t ts = 0;
    bson_t entry;
    bool found = false;

    ASSERT(eng != NULL);
    ASSERT_INT_EQ(shl_catalog_create_collection(eng, "rp.c", NULL, NULL, &ts, &st), 0);
    ASSERT_INT_EQ(shl_oplog_read(eng, ts, &entry, &found, &st), 0);
    ASSERT(found);
    /* Applied again (recovery from before it, a fetched entry): success, no status left. */
    shl_status_clear(&st);
    ASSERT_INT_EQ(shl_oplog_apply(eng, &entry, &st), 0);
    ASSERT_INT_EQ(st.code, 0);
    bson_destroy(&entry);
    shl_storage_close(eng);
    rmrf(dir);
    bson_free(dir);
}
