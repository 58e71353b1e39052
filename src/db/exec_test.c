/*
 * exec_test.c -- the executor's stages and access-path selection over a real storage
 * engine in a temporary directory: which stages a query gets, what each returns, index
 * bounds (ascending, descending, multikey) against a collection scan, and snapshots.
 */
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/options.h"
#include "base/unit_test.h"
#include "bson/keystring.h"
#include "db/exec.h"

__attribute__((constructor)) static void
quiet_logs(void)
{
    shl_options_init();
    if (getenv("SHL_TEST_LOG") == NULL) {
        shl_log_open("/tmp/shl_db_exec_test.log");
    }
}

typedef struct fixture {
    char dir[64];
    shl_storage_engine_t *eng;
    shl_collection_t *coll;
} fixture_t;

typedef struct insert_arg {
    shl_collection_t *coll;
    bson_t **docs;
    int n;
} insert_arg_t;

static int
insert_fn(shl_storage_txn_t *txn, void *arg, shl_status_t *st)
{
    insert_arg_t *a = arg;
    for (int i = 0; i < a->n; i++) {
        int ret = shl_doc_insert(txn, a->coll, a->docs[i], NULL, NULL, st);
        if (ret != 0) {
            return ret;
        }
    }
    return 0;
}

/* Open an engine with collection test.c holding the documents of 'json' (an array). */
static bool
setup(fixture_t *f, const char *json)
{
    shl_storage_options_t o;
    shl_status_t st;
    bson_t *arr = shl_test_bson(json);
    bson_iter_t it;
    bson_t *docs[64];
    int n = 0;
    insert_arg_t a;
    bool ok;

    memset(f, 0, sizeof(*f));
    snprintf(f->dir, sizeof(f->dir), "/tmp/shl_db_exec_XXXXXX");
    if (mkdtemp(f->dir) == NULL) {
        return false;
    }
    memset(&o, 0, sizeof(o));
    o.dbpath = f->dir;
    o.cache_size_mb = 64;
    o.no_background_threads = true;
    if (shl_storage_open(&o, &f->eng, &st) != 0 ||
        shl_catalog_create_collection(f->eng, "test.c", NULL, NULL, NULL, &st) != 0) {
        fprintf(stderr, "setup: %s\n", st.reason);
        return false;
    }
    f->coll = shl_catalog_get(f->eng, "test.c");
    bson_iter_init(&it, arr);
    while (bson_iter_next(&it) && n < 64) {
        const uint8_t *data;
        uint32_t len;
        bson_iter_document(&it, &len, &data);
        docs[n++] = bson_new_from_data(data, len);
    }
    a.coll = f->coll;
    a.docs = docs;
    a.n = n;
    ok = shl_storage_write_retry(f->eng, insert_fn, &a, NULL, &st) == 0;
    for (int i = 0; i < n; i++) {
        bson_destroy(docs[i]);
    }
    bson_destroy(arr);
    return ok;
}

static void
add_index(fixture_t *f, const char *spec_json)
{
    shl_status_t st;
    bson_t *spec = shl_test_bson(spec_json);
    if (shl_catalog_create_index(f->eng, "test.c", spec, NULL, NULL, &st) != 0) {
        fprintf(stderr, "create index: %s\n", st.reason);
    }
    bson_destroy(spec);
    shl_collection_release(f->coll);
    f->coll = shl_catalog_get(f->eng, "test.c");
}

static void
teardown(fixture_t *f)
{
    char cmd[128];
    shl_collection_release(f->coll);
    shl_storage_close(f->eng);
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", f->dir);
    if (system(cmd) != 0) {
        fprintf(stderr, "cannot remove %s\n", f->dir);
    }
}

/* Stage names from 's' down: "FETCH,OR(IXSCAN,IXSCAN)". */
static void
stage_names(const exec_stage_t *s, char *out, size_t len)
{
    for (; s != NULL; s = s->child) {
        strncat(out, s->ops->name, len - strlen(out) - 1);
        if (s->nchildren > 0) {
            strncat(out, "(", len - strlen(out) - 1);
            for (size_t i = 0; i < s->nchildren; i++) {
                stage_names(s->children[i], out, len);
                if (i + 1 < s->nchildren) {
                    strncat(out, ",", len - strlen(out) - 1);
                }
            }
            strncat(out, ")", len - strlen(out) - 1);
        }
        if (s->child != NULL) {
            strncat(out, ",", len - strlen(out) - 1);
        }
    }
}

/* run() builds count_only queries while this is set. */
static bool run_count_only;
/* The last run's totals (keys and documents examined) and rejected plans. */
static int64_t run_keys, run_docs;
static int run_rejected;

static void
totals(const exec_stage_t *s)
{
    for (; s != NULL; s = s->child) {
        run_keys += s->stats.keys_examined;
        run_docs += s->stats.docs_examined;
        for (size_t i = 0; i < s->nchildren; i++) {
            totals(s->children[i]);
        }
    }
}

/* Run a find-like query; 'out' receives the result documents as an array (count_only:
 * {_id: rid} per row). The stage names from the root down go to 'stages'
 * ("PROJECTION_SIMPLE,LIMIT,...'). */
static int
run(fixture_t *f, const char *filter, const char *sort, const char *proj, const char *hint,
    int64_t skip, int64_t limit, bson_t *out, char *stages, size_t stages_len)
{
    exec_query_t q;
    exec_plan_t *p = NULL;
    shl_status_t st;
    bson_t *fd = filter ? shl_test_bson(filter) : NULL;
    bson_t *sd = sort ? shl_test_bson(sort) : NULL;
    bson_t *pd = proj ? shl_test_bson(proj) : NULL;
    bson_t *hd = NULL;
    int ret, n = 0;

    bson_init(out);
    stages[0] = '\0';
    ret = exec_query_init(&q, fd, sd, pd, &st);
    if (ret == 0 && hint != NULL) {
        bson_iter_t it;
        hd = shl_test_bson(hint);
        bson_iter_init_find(&it, hd, "h");
        q.has_hint = true;
        q.hint = *bson_iter_value(&it);
    }
    q.skip = skip;
    q.limit = limit;
    q.count_only = run_count_only;
    run_keys = run_docs = 0;
    run_rejected = 0;
    if (ret == 0) {
        ret = exec_plan_build(f->eng, NULL, 0, f->coll, "test.c", &q, &p, &st);
    }
    while (ret == 0) {
        exec_row_t row;
        bool eof;
        char k[16];
        const char *kp;
        ret = exec_plan_next(p, NULL, &row, &eof, &st);
        if (ret != 0 || eof) {
            break;
        }
        bson_uint32_to_string((uint32_t)n++, &kp, k, sizeof(k));
        if (row.doc != NULL) {
            bson_append_document(out, kp, -1, row.doc);
        } else {
            bson_t d;
            bson_append_document_begin(out, kp, -1, &d);
            BSON_APPEND_INT64(&d, "rid", row.rid);
            bson_append_document_end(out, &d);
        }
    }
    if (p != NULL) {
        bson_iter_t it, r;
        stage_names(p->root, stages, stages_len);
        totals(p->root);
        if (bson_iter_init_find(&it, &p->rejected, "r") && bson_iter_recurse(&it, &r)) {
            while (bson_iter_next(&r)) {
                run_rejected++;
            }
        }
    }
    if (ret != 0) {
        fprintf(stderr, "run: %d %s\n", ret, st.reason);
    }
    exec_plan_destroy(p);
    exec_query_cleanup(&q);
    for (bson_t **d = (bson_t *[]){fd, sd, pd, hd}, **e = d + 4; d < e; d++) {
        if (*d != NULL) {
            bson_destroy(*d);
        }
    }
    return ret;
}

#define DOCS5                                                                                      \
    "[{'_id': 1, 'a': 5, 'b': 'x'}, {'_id': 2, 'a': 1, 'b': 'y'}, {'_id': 3, 'a': 9},"             \
    " {'_id': 4, 'a': [2, 7]}, {'_id': 5}]"

SHL_TEST(exec_collscan_filter_and_stages)
{
    fixture_t f;
    bson_t out;
    char stages[256];
    ASSERT(setup(&f, DOCS5));
    ASSERT_INT_EQ(run(&f, "{'a': {'$gt': 4}}", NULL, NULL, NULL, 0, 0, &out, stages, 256), 0);
    ASSERT_BSON_EQ(&out, "{'0': {'_id': 1, 'a': 5, 'b': 'x'}, '1': {'_id': 3, 'a': 9},"
                         " '2': {'_id': 4, 'a': [2, 7]}}");
    ASSERT_STR_EQ(stages, "COLLSCAN");
    bson_destroy(&out);
    ASSERT_INT_EQ(run(&f, "{}", "{'a': -1}", "{'a': 1, '_id': 0}", NULL, 1, 2, &out, stages, 256),
                  0);
    /* Descending: 9, then the array [2, 7] sorts by its largest (7), then 5, 1, missing. */
    ASSERT_BSON_EQ(&out, "{'0': {'a': [2, 7]}, '1': {'a': 5}}");
    ASSERT_STR_EQ(stages, "PROJECTION_SIMPLE,LIMIT,SKIP,SORT,COLLSCAN");
    bson_destroy(&out);
    ASSERT_INT_EQ(run(&f, "{}", NULL, NULL, "{'h': {'$natural': -1}}", 0, 2, &out, stages, 256), 0);
    ASSERT_BSON_EQ(&out, "{'0': {'_id': 5}, '1': {'_id': 4, 'a': [2, 7]}}");
    bson_destroy(&out);
    teardown(&f);
}

SHL_TEST(exec_idhack)
{
    fixture_t f;
    bson_t out;
    char stages[256];
    ASSERT(setup(&f, DOCS5));
    ASSERT_INT_EQ(run(&f, "{'_id': 3}", NULL, NULL, NULL, 0, 0, &out, stages, 256), 0);
    ASSERT_BSON_EQ(&out, "{'0': {'_id': 3, 'a': 9}}");
    ASSERT_STR_EQ(stages, "IDHACK");
    bson_destroy(&out);
    ASSERT_INT_EQ(run(&f, "{'_id': {'$eq': 42}}", NULL, NULL, NULL, 0, 0, &out, stages, 256), 0);
    ASSERT_BSON_EQ(&out, "{}");
    ASSERT_STR_EQ(stages, "IDHACK");
    bson_destroy(&out);
    /* Not a point lookup: an operator, or another predicate. The planner scans _id_. */
    ASSERT_INT_EQ(run(&f, "{'_id': {'$gte': 4}}", NULL, NULL, NULL, 0, 0, &out, stages, 256), 0);
    ASSERT_STR_EQ(stages, "FETCH,IXSCAN");
    bson_destroy(&out);
    ASSERT_INT_EQ(run(&f, "{'_id': 1, 'a': 6}", NULL, NULL, NULL, 0, 0, &out, stages, 256), 0);
    ASSERT_STR_EQ(stages, "FETCH,IXSCAN");
    ASSERT_BSON_EQ(&out, "{}");
    bson_destroy(&out);
    /* No predicate on an indexed field: a collection scan. */
    ASSERT_INT_EQ(run(&f, "{'a': 6}", NULL, NULL, NULL, 0, 0, &out, stages, 256), 0);
    ASSERT_STR_EQ(stages, "COLLSCAN");
    ASSERT_BSON_EQ(&out, "{}");
    bson_destroy(&out);
    teardown(&f);
}

/* Every hinted scan must return what a collection scan returns, whatever the bounds. */
SHL_TEST(exec_ixscan_bounds_never_lose_documents)
{
    static const char *const filters[] = {
        "{'a': 5}",          "{'a': {'$gt': 4}}",  "{'a': {'$gte': 5, '$lt': 8}}",
        "{'a': {'$lt': 3}}", "{'a': {'$lte': 7}}", "{'a': {'$gt': 3, '$lt': 6}}",
        "{'a': null}",       "{'a': {'$eq': 7}}",  "{'b': 'x'}"};
    static const char *const hints[] = {"{'h': 'a_1'}", "{'h': 'a_-1'}", "{'h': {'a': 1}}",
                                        "{'h': '_id_'}"};
    fixture_t f;
    char stages[256];
    ASSERT(setup(&f, DOCS5));
    add_index(&f, "{'key': {'a': 1}, 'name': 'a_1'}");
    add_index(&f, "{'key': {'a': -1}, 'name': 'a_-1'}");
    for (size_t i = 0; i < sizeof(filters) / sizeof(filters[0]); i++) {
        bson_t want, got;
        ASSERT_INT_EQ(run(&f, filters[i], "{'_id': 1}", NULL, NULL, 0, 0, &want, stages, 256), 0);
        for (size_t h = 0; h < sizeof(hints) / sizeof(hints[0]); h++) {
            ASSERT_INT_EQ(
                run(&f, filters[i], "{'_id': 1}", NULL, hints[h], 0, 0, &got, stages, 256), 0);
            /* The _id index yields the {_id: 1} order itself: no SORT stage. */
            ASSERT_STR_EQ(stages, h == 3 ? "FETCH,IXSCAN" : "SORT,FETCH,IXSCAN");
            if (!bson_equal(&want, &got)) {
                char *w = bson_as_relaxed_extended_json(&want, NULL);
                char *g = bson_as_relaxed_extended_json(&got, NULL);
                fprintf(stderr, "filter %s hint %s: want %s got %s\n", filters[i], hints[h], w, g);
                bson_free(w);
                bson_free(g);
                ASSERT(false);
            }
            bson_destroy(&got);
        }
        bson_destroy(&want);
    }
    teardown(&f);
}

SHL_TEST(exec_ixscan_bounds_are_tight_for_equality)
{
    fixture_t f;
    bson_t out;
    char stages[256];
    exec_query_t q;
    exec_plan_t *p = NULL;
    shl_status_t st;
    bson_t *filter = shl_test_bson("{'a': 7}");
    bson_t *hint = shl_test_bson("{'h': 'a_1'}");
    bson_iter_t it;
    int n = 0;
    const exec_stage_t *leaf;

    ASSERT(setup(&f, DOCS5));
    add_index(&f, "{'key': {'a': 1}, 'name': 'a_1'}");
    ASSERT_INT_EQ(exec_query_init(&q, filter, NULL, NULL, &st), 0);
    bson_iter_init_find(&it, hint, "h");
    q.has_hint = true;
    q.hint = *bson_iter_value(&it);
    ASSERT_INT_EQ(exec_plan_build(f.eng, NULL, 0, f.coll, "test.c", &q, &p, &st), 0);
    for (;;) {
        exec_row_t row;
        bool eof;
        ASSERT_INT_EQ(exec_plan_next(p, NULL, &row, &eof, &st), 0);
        if (eof) {
            break;
        }
        n++;
    }
    ASSERT_INT_EQ(n, 1);
    leaf = p->root;
    while (leaf->child != NULL) {
        leaf = leaf->child;
    }
    /* Only the one key 7 (of the array [2, 7]) is inside the bounds. */
    ASSERT_INT_EQ(leaf->stats.keys_examined, 1);
    exec_plan_destroy(p);
    exec_query_cleanup(&q);
    bson_destroy(filter);
    bson_destroy(hint);
    (void)out;
    (void)stages;
    teardown(&f);
}

SHL_TEST(exec_hint_errors_and_missing_collection)
{
    fixture_t f;
    bson_t out;
    char stages[256];
    exec_query_t q;
    exec_plan_t *p = NULL;
    shl_status_t st;
    bson_t *hint = shl_test_bson("{'h': 'nope'}");
    bson_iter_t it;

    ASSERT(setup(&f, DOCS5));
    ASSERT_INT_EQ(exec_query_init(&q, NULL, NULL, NULL, &st), 0);
    bson_iter_init_find(&it, hint, "h");
    q.has_hint = true;
    q.hint = *bson_iter_value(&it);
    ASSERT_INT_EQ(exec_plan_build(f.eng, NULL, 0, f.coll, "test.c", &q, &p, &st), 2);
    ASSERT(strstr(st.reason, "hint provided does not correspond to an existing index") != NULL);
    /* A missing collection is an EOF plan, hint or not. */
    ASSERT_INT_EQ(exec_plan_build(f.eng, NULL, 0, NULL, "test.none", &q, &p, &st), 0);
    ASSERT_STR_EQ(p->root->ops->name, "EOF");
    exec_plan_destroy(p);
    exec_query_cleanup(&q);
    bson_destroy(hint);
    (void)out;
    (void)stages;
    teardown(&f);
}

/* A plan keeps reading the snapshot it started with, whatever commits meanwhile. */
SHL_TEST(exec_plan_reads_one_snapshot)
{
    fixture_t f;
    exec_query_t q;
    exec_plan_t *p = NULL;
    shl_status_t st;
    bson_t *more[2];
    insert_arg_t a;
    int n = 0;

    ASSERT(setup(&f, DOCS5));
    ASSERT_INT_EQ(exec_query_init(&q, NULL, NULL, NULL, &st), 0);
    ASSERT_INT_EQ(exec_plan_build(f.eng, NULL, 0, f.coll, "test.c", &q, &p, &st), 0);
    for (int i = 0; i < 2; i++) {
        exec_row_t row;
        bool eof;
        ASSERT_INT_EQ(exec_plan_next(p, NULL, &row, &eof, &st), 0);
        ASSERT(!eof);
        n++;
    }
    more[0] = shl_test_bson("{'_id': 100}");
    more[1] = shl_test_bson("{'_id': 101}");
    a.coll = f.coll;
    a.docs = more;
    a.n = 2;
    ASSERT_INT_EQ(shl_storage_write_retry(f.eng, insert_fn, &a, NULL, &st), 0);
    for (;;) {
        exec_row_t row;
        bool eof;
        ASSERT_INT_EQ(exec_plan_next(p, NULL, &row, &eof, &st), 0);
        if (eof) {
            break;
        }
        n++;
    }
    ASSERT_INT_EQ(n, 5);
    exec_plan_destroy(p);
    exec_query_cleanup(&q);
    bson_destroy(more[0]);
    bson_destroy(more[1]);
    teardown(&f);
}

SHL_TEST(exec_bounds_description)
{
    shl_keystring_t a, b;
    bool ha, hb;
    char desc[100];
    bson_t *filter = shl_test_bson("{'a': {'$lt': 9, '$gte': 2}}");
    shl_keystring_init(&a);
    shl_keystring_init(&b);
    exec_bounds_for_field(filter, "a", false, &a, &b, &ha, &hb, desc, sizeof(desc));
    /* One side only: two ranges cannot be intersected without knowing multikeyness. */
    ASSERT(ha && !hb);
    ASSERT_STR_EQ(desc, "a >= 2");
    shl_keystring_reset(&a);
    shl_keystring_reset(&b);
    exec_bounds_for_field(filter, "a", true, &a, &b, &ha, &hb, desc, sizeof(desc));
    ASSERT(!ha && hb);
    shl_keystring_reset(&a);
    shl_keystring_reset(&b);
    exec_bounds_for_field(filter, "b", false, &a, &b, &ha, &hb, desc, sizeof(desc));
    ASSERT(!ha && !hb);
    ASSERT_STR_EQ(desc, "[MinKey, MaxKey]");
    shl_keystring_cleanup(&a);
    shl_keystring_cleanup(&b);
    bson_destroy(filter);
}

#define DOCS_S                                                                                     \
    "[{'_id': 1, 'a': 1, 'b': 'x', 'c': 'p'}, {'_id': 2, 'a': 1, 'b': 'y', 'c': 'q'},"             \
    " {'_id': 3, 'a': 1, 'b': 'z', 'c': 'p'}, {'_id': 4, 'a': 1, 'b': 'w', 'c': 'q'},"             \
    " {'_id': 5, 'a': 2, 'b': 'v', 'c': 'p'}, {'_id': 6, 'a': 1, 'c': 'q'},"                       \
    " {'_id': 7, 'a': 1, 'b': null}, {'_id': 8, 'a': 1.5, 'b': 'x'}]"

SHL_TEST(exec_or_of_index_scans)
{
    fixture_t f;
    bson_t out;
    char stages[256];
    ASSERT(setup(&f, DOCS_S));
    add_index(&f, "{'key': {'a': 1}, 'name': 'a_1'}");
    add_index(&f, "{'key': {'b': 1}, 'name': 'b_1'}");
    /* Both branches indexed: OR of IXSCANs, _id 5 (in both) once, FETCH filters. */
    ASSERT_INT_EQ(run(&f, "{'$or': [{'a': 2}, {'b': {'$in': ['v', 'y']}}]}", "{'_id': 1}", NULL,
                      NULL, 0, 0, &out, stages, 256),
                  0);
    ASSERT_STR_EQ(stages, "SORT,FETCH,OR(IXSCAN,IXSCAN)");
    ASSERT_BSON_EQ(&out, "{'0': {'_id': 2, 'a': 1, 'b': 'y', 'c': 'q'},"
                         " '1': {'_id': 5, 'a': 2, 'b': 'v', 'c': 'p'}}");
    ASSERT_INT_EQ(run_docs, 2);
    bson_destroy(&out);
    /* A branch on an unindexed field: COLLSCAN. */
    ASSERT_INT_EQ(
        run(&f, "{'$or': [{'a': 2}, {'c': 'q'}]}", NULL, NULL, NULL, 0, 0, &out, stages, 256), 0);
    ASSERT_STR_EQ(stages, "COLLSCAN");
    bson_destroy(&out);
    teardown(&f);
}

SHL_TEST(exec_multi_plan_trial)
{
    fixture_t f;
    bson_t out;
    char stages[256];
    ASSERT(setup(&f, DOCS_S));
    add_index(&f, "{'key': {'a': 1}, 'name': 'a_1'}");
    add_index(&f, "{'key': {'c': 1}, 'name': 'c_1'}");
    /* a: 2 has one key, c: 'p' three: the a_1 plan reaches EOF first and wins. */
    ASSERT_INT_EQ(run(&f, "{'c': 'p', 'a': 2}", NULL, NULL, NULL, 0, 0, &out, stages, 256), 0);
    ASSERT_STR_EQ(stages, "FETCH,IXSCAN");
    ASSERT_INT_EQ(run_keys, 1);
    ASSERT_INT_EQ(run_rejected, 1);
    ASSERT_BSON_EQ(&out, "{'0': {'_id': 5, 'a': 2, 'b': 'v', 'c': 'p'}}");
    bson_destroy(&out);
    /* A hint: no trial, nothing rejected. */
    ASSERT_INT_EQ(
        run(&f, "{'c': 'p', 'a': 2}", NULL, NULL, "{'h': 'c_1'}", 0, 0, &out, stages, 256), 0);
    ASSERT_INT_EQ(run_keys, 3);
    ASSERT_INT_EQ(run_rejected, 0);
    bson_destroy(&out);
    teardown(&f);
}

SHL_TEST(exec_covered_projection)
{
    fixture_t f;
    bson_t out;
    char stages[256];
    ASSERT(setup(&f, DOCS_S));
    add_index(&f, "{'key': {'b': 1, 'c': 1}, 'name': 'b_1_c_1'}");
    ASSERT_INT_EQ(run(&f, "{'b': {'$gte': 'w', '$lte': 'y'}, 'c': 'q'}", NULL,
                      "{'_id': 0, 'c': 1, 'b': 1}", NULL, 0, 0, &out, stages, 256),
                  0);
    ASSERT_STR_EQ(stages, "PROJECTION_COVERED,IXSCAN");
    ASSERT_BSON_EQ(&out, "{'0': {'b': 'w', 'c': 'q'}, '1': {'b': 'y', 'c': 'q'}}");
    /* Only _id 8 (b 'x', no c: a null key) is read from its record. */
    ASSERT_INT_EQ(run_docs, 1);
    bson_destroy(&out);
    /* A null key value (null or missing c?) is read from the record: _id 8 has no c. */
    ASSERT_INT_EQ(
        run(&f, "{'b': 'x'}", NULL, "{'_id': 0, 'b': 1, 'c': 1}", NULL, 0, 0, &out, stages, 256),
        0);
    ASSERT_STR_EQ(stages, "PROJECTION_COVERED,IXSCAN");
    ASSERT_BSON_EQ(&out, "{'0': {'b': 'x'}, '1': {'b': 'x', 'c': 'p'}}"); /* (x, null) first */
    ASSERT_INT_EQ(run_docs, 1);
    bson_destroy(&out);
    /* A null comparison is not covered (MongoDB's rule: null or missing?): FETCH. */
    ASSERT_INT_EQ(run(&f, "{'b': null}", NULL, "{'_id': 0, 'b': 1}", NULL, 0, 0, &out, stages, 256),
                  0);
    ASSERT_STR_EQ(stages, "PROJECTION_SIMPLE,FETCH,IXSCAN");
    ASSERT_BSON_EQ(&out, "{'0': {'b': null}, '1': {}}");
    bson_destroy(&out);
    /* _id is not in the index: FETCH. */
    ASSERT_INT_EQ(run(&f, "{'b': 'x'}", NULL, "{'b': 1}", NULL, 0, 0, &out, stages, 256), 0);
    ASSERT_STR_EQ(stages, "PROJECTION_SIMPLE,FETCH,IXSCAN");
    bson_destroy(&out);
    teardown(&f);
}

SHL_TEST(exec_count_scan)
{
    fixture_t f;
    bson_t out;
    char stages[256];
    ASSERT(setup(&f, DOCS5));
    add_index(&f, "{'key': {'a': 1}, 'name': 'a_1'}"); /* multikey: [2, 7] */
    add_index(&f, "{'key': {'b': 1}, 'name': 'b_1'}");
    run_count_only = true;
    ASSERT_INT_EQ(run(&f, "{'b': 'x'}", NULL, NULL, NULL, 0, 0, &out, stages, 256), 0);
    ASSERT_STR_EQ(stages, "COUNT,COUNT_SCAN");
    ASSERT_INT_EQ(bson_count_keys(&out), 1);
    ASSERT_INT_EQ(run_docs, 0);
    bson_destroy(&out);
    ASSERT_INT_EQ(
        run(&f, "{'b': {'$gt': 'a', '$lt': 'z'}}", NULL, NULL, NULL, 0, 0, &out, stages, 256), 0);
    ASSERT_STR_EQ(stages, "COUNT,COUNT_SCAN");
    ASSERT_INT_EQ(bson_count_keys(&out), 2);
    bson_destroy(&out);
    /* A multikey index has several keys per document: FETCH. */
    ASSERT_INT_EQ(run(&f, "{'a': 7}", NULL, NULL, NULL, 0, 0, &out, stages, 256), 0);
    ASSERT_STR_EQ(stages, "COUNT,FETCH,IXSCAN");
    ASSERT_INT_EQ(bson_count_keys(&out), 1);
    bson_destroy(&out);
    run_count_only = false;
    teardown(&f);
}
