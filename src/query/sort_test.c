/*
 * sort_test.c -- table-driven sort cases: (documents, sort spec, expected _id order or error
 * code) with MongoDB 7.0's rules, plus the sorter's top-k, stability and memory limit.
 */
#include <string.h>

#include "base/options.h"
#include "base/unit_test.h"
#include "query/sort.h"

typedef struct scase {
    const char *docs; /* {'d': [ ... ]} */
    const char *spec;
    const char *want; /* {'ids': [ ... ]} */
    int code;
} scase_t;

static const scase_t cases[] = {
    {"{'d': [{'_id': 1, 'a': 3}, {'_id': 2, 'a': 1}, {'_id': 3, 'a': 2}]}", "{'a': 1}",
     "{'ids': [2, 3, 1]}", 0},
    {"{'d': [{'_id': 1, 'a': 3}, {'_id': 2, 'a': 1}, {'_id': 3, 'a': 2}]}", "{'a': -1}",
     "{'ids': [1, 3, 2]}", 0},
    {"{'d': [{'_id': 1, 'a': 'x'}, {'_id': 2, 'a': 5}, {'_id': 3}, {'_id': 4, 'a': null}]}",
     "{'a': 1}", "{'ids': [3, 4, 2, 1]}", 0},
    {"{'d': [{'_id': 1, 'a': [5, 1]}, {'_id': 2, 'a': 2}, {'_id': 3, 'a': [3]}]}", "{'a': 1}",
     "{'ids': [1, 2, 3]}", 0},
    {"{'d': [{'_id': 1, 'a': [5, 1]}, {'_id': 2, 'a': 2}, {'_id': 3, 'a': [3]}]}", "{'a': -1}",
     "{'ids': [1, 3, 2]}", 0},
    {"{'d': [{'_id': 1, 'a': []}, {'_id': 2, 'a': null}, {'_id': 3, 'a': 0}]}", "{'a': 1}",
     "{'ids': [1, 2, 3]}", 0},
    {"{'d': [{'_id': 1, 'a': 1, 'b': 1}, {'_id': 2, 'a': 1, 'b': 2}, {'_id': 3, 'a': 0, 'b': 9}]}",
     "{'a': 1, 'b': -1}", "{'ids': [3, 2, 1]}", 0},
    {"{'d': [{'_id': 1, 'a': {'b': 2}}, {'_id': 2, 'a': {'b': 1}}]}", "{'a.b': 1}",
     "{'ids': [2, 1]}", 0},
    {"{'d': [{'_id': 1, 'a': [{'b': 5}, {'b': 0}]}, {'_id': 2, 'a': [{'b': 1}]}]}", "{'a.b': 1}",
     "{'ids': [1, 2]}", 0},
    {"{'d': [{'_id': 1, 'a': [{'b': 5}, {'b': 0}]}, {'_id': 2, 'a': [{'b': 1}]}]}", "{'a.b': -1}",
     "{'ids': [1, 2]}", 0},
    {"{'d': [{'_id': 1, 'a': [9, 1]}, {'_id': 2, 'a': [2, 8]}]}", "{'a.0': 1}", "{'ids': [2, 1]}",
     0},
    {"{'d': [{'_id': 1, 'a': 1}, {'_id': 2, 'a': 1.0}, {'_id': 3, 'a': {'$numberLong': '1'}}]}",
     "{'a': 1}", "{'ids': [1, 2, 3]}", 0},
    {"{'d': [{'_id': 1, 'a': 2}, {'_id': 2, 'a': 1.5}, {'_id': 3, 'a': {'$numberDecimal': "
     "'1.7'}}]}",
     "{'a': 1}", "{'ids': [2, 3, 1]}", 0},
    {"{'d': [{'_id': 1, 'a': true}, {'_id': 2, 'a': 'z'}, {'_id': 3, 'a': {'x': 1}}, {'_id': 4, "
     "'a': [[1]]}]}",
     "{'a': 1}", "{'ids': [2, 3, 4, 1]}", 0},
    {"{'d': [{'_id': 2}, {'_id': 1}]}", "{}", "{'ids': [2, 1]}", 0},
    {"{'d': []}", "{'a': 2}", NULL, 15975},
    {"{'d': []}", "{'a': 0}", NULL, 15975},
    {"{'d': []}", "{'a': 'x'}", NULL, 15974},
    /* The score a text search left (none here: ties, in insertion order). */
    {"{'d': [{'_id': 1}, {'_id': 2}]}", "{'a': {'$meta': 'textScore'}}", "{'ids': [1, 2]}", 0},
    {"{'d': []}", "{'a': {'$foo': 1}}", NULL, 17312},
    {"{'d': []}", "{'': 1}", NULL, 40352},
    {"{'d': []}", "{'$a': 1}", NULL, 16410},
};

SHL_TEST(sort_table)
{
    int failures = 0;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const scase_t *c = &cases[i];
        bson_t *docs = shl_test_bson(c->docs), *spec = shl_test_bson(c->spec);
        bson_t ids = BSON_INITIALIZER, arr;
        shl_sort_pattern_t *p = NULL;
        shl_sorter_t *s = NULL;
        shl_status_t st = SHL_STATUS_INIT;
        bson_iter_t it, di;
        const bson_t *d;
        int rc = shl_sort_pattern_new(spec, &p, &st);
        if (rc != c->code) {
            shl_test_fail_here(__FILE__, __LINE__, "case %zu: code %d want %d (%s)", i, rc, c->code,
                               st.reason);
            failures++;
        }
        if (rc == 0) {
            s = shl_sorter_new(p, 0, 0);
            bson_iter_init_find(&it, docs, "d");
            bson_iter_recurse(&it, &di);
            while (bson_iter_next(&di)) {
                bson_t doc;
                uint32_t len;
                const uint8_t *data;
                bson_iter_document(&di, &len, &data);
                bson_init_static(&doc, data, len);
                shl_sorter_add(s, &doc, &st);
            }
            shl_sorter_finish(s);
            bson_append_array_begin(&ids, "ids", 3, &arr);
            int k = 0;
            while ((d = shl_sorter_next(s)) != NULL) {
                char key[16];
                bson_iter_t idi;
                snprintf(key, sizeof(key), "%d", k++);
                bson_iter_init_find(&idi, d, "_id");
                bson_append_value(&arr, key, -1, bson_iter_value(&idi));
            }
            bson_append_array_end(&ids, &arr);
            if (c->want != NULL) {
                char *got_, *want_;
                if (!shl_test_bson_eq(&ids, c->want, &got_, &want_)) {
                    shl_test_fail_here(__FILE__, __LINE__, "case %zu %s: got %s want %s", i,
                                       c->spec, got_, want_);
                    failures++;
                }
                bson_free(got_);
                bson_free(want_);
            }
        }
        shl_sorter_destroy(s);
        shl_sort_pattern_destroy(p);
        bson_destroy(&ids);
        bson_destroy(docs);
        bson_destroy(spec);
    }
    ASSERT_INT_EQ(failures, 0);
}

SHL_TEST(sort_top_k_stable_and_limit)
{
    bson_t *spec = shl_test_bson("{'k': 1}");
    shl_sort_pattern_t *p = NULL;
    shl_status_t st;
    shl_sorter_t *s;
    const bson_t *d;
    int expect[3] = {0, 3, 6}, n = 0;

    shl_options_init();
    ASSERT_INT_EQ(shl_sort_pattern_new(spec, &p, &st), 0);
    /* top-3 of 9 documents whose keys are i % 3: the three with k == 0, in insertion order */
    s = shl_sorter_new(p, 3, 0);
    for (int i = 0; i < 9; i++) {
        bson_t *doc = BCON_NEW("_id", BCON_INT32(i), "k", BCON_INT32(i % 3));
        ASSERT_INT_EQ(shl_sorter_add(s, doc, &st), 0);
        bson_destroy(doc);
    }
    ASSERT_INT_EQ(shl_sorter_count(s), 3);
    shl_sorter_finish(s);
    while ((d = shl_sorter_next(s)) != NULL) {
        bson_iter_t it;
        bson_iter_init_find(&it, d, "_id");
        ASSERT_INT_EQ(bson_iter_int32(&it), expect[n++]);
    }
    ASSERT_INT_EQ(n, 3);
    shl_sorter_destroy(s);

    /* a 1000-byte limit fails with 292 */
    s = shl_sorter_new(p, 0, 1000);
    int rc = 0;
    for (int i = 0; i < 100 && rc == 0; i++) {
        bson_t *doc = BCON_NEW("_id", BCON_INT32(i), "pad", BCON_UTF8("xxxxxxxxxxxxxxxxxxxxxxxx"));
        rc = shl_sorter_add(s, doc, &st);
        bson_destroy(doc);
    }
    ASSERT_INT_EQ(rc, 292);
    ASSERT_STR_EQ(st.reason, "Sort exceeded memory limit of 1000 bytes, but did not opt in to "
                             "external sorting.");
    shl_sorter_destroy(s);

    /* the default comes from internalQueryMaxBlockingSortMemoryUsageBytes */
    s = shl_sorter_new(p, 0, 0);
    ASSERT_INT_EQ(shl_sorter_memory(s), 0);
    shl_sorter_destroy(s);
    shl_sort_pattern_destroy(p);
    bson_destroy(spec);
}

SHL_TEST(sort_keys)
{
    bson_t *spec = shl_test_bson("{'a': 1, 'b': -1}");
    bson_t *doc = shl_test_bson("{'a': [3, 1, 2], 'b': [3, 1, 2]}"), key;
    shl_sort_pattern_t *p = NULL;
    shl_status_t st;
    ASSERT_INT_EQ(shl_sort_pattern_new(spec, &p, &st), 0);
    shl_sort_key_compute(p, doc, &key);
    ASSERT_BSON_EQ(&key, "{'0': 1, '1': 3}");
    bson_destroy(&key);
    shl_sort_pattern_destroy(p);
    bson_destroy(spec);
    bson_destroy(doc);
}

/* Collation: (documents, sort, collation, expected _id order). */
static const struct {
    const char *docs, *spec, *collation, *want;
} coll_sorts[] = {
    {"{'d': [{'_id': 1, 'a': 'b'}, {'_id': 2, 'a': 'B'}, {'_id': 3, 'a': 'a'}, {'_id': 4, 'a': "
     "'C'}]}",
     "{'a': 1}", "{'locale': 'en'}", "{'ids': [3, 1, 2, 4]}"},
    {"{'d': [{'_id': 1, 'a': 'b'}, {'_id': 2, 'a': 'B'}, {'_id': 3, 'a': 'a'}, {'_id': 4, 'a': "
     "'C'}]}",
     "{'a': 1}", "{'locale': 'en', 'caseFirst': 'upper'}", "{'ids': [3, 2, 1, 4]}"},
    {"{'d': [{'_id': 1, 'a': '10'}, {'_id': 2, 'a': '9'}, {'_id': 3, 'a': 2}]}", "{'a': -1}",
     "{'locale': 'en', 'numericOrdering': true}", "{'ids': [1, 2, 3]}"},
    /* An array sorts by its smallest element under the collation ('a' < 'B'). */
    {"{'d': [{'_id': 1, 'a': ['B', 'z']}, {'_id': 2, 'a': ['c', 'a']}]}", "{'a': 1}",
     "{'locale': 'en'}", "{'ids': [2, 1]}"},
    {"{'d': [{'_id': 1, 'a': 'x'}, {'_id': 2, 'a': 'X'}, {'_id': 3, 'a': 'x'}]}", "{'a': 1}",
     "{'locale': 'en', 'strength': 2}", "{'ids': [1, 2, 3]}"},
};

SHL_TEST(sort_collation_table)
{
    for (size_t i = 0; i < sizeof(coll_sorts) / sizeof(coll_sorts[0]); i++) {
        bson_t *docs = shl_test_bson(coll_sorts[i].docs), *spec = shl_test_bson(coll_sorts[i].spec);
        bson_t *cspec = shl_test_bson(coll_sorts[i].collation);
        bson_t ids = BSON_INITIALIZER, arr;
        shl_sort_pattern_t *p = NULL;
        shl_collator_t *coll = NULL;
        shl_status_t st = SHL_STATUS_INIT;
        bson_iter_t it, di;
        const bson_t *d;
        int k = 0;
        ASSERT_INT_EQ(shl_collator_new(cspec, &coll, &st), 0);
        ASSERT_INT_EQ(shl_sort_pattern_new(spec, &p, &st), 0);
        shl_sort_pattern_set_collator(p, coll);
        shl_sorter_t *s = shl_sorter_new(p, 0, 0);
        bson_iter_init_find(&it, docs, "d");
        bson_iter_recurse(&it, &di);
        while (bson_iter_next(&di)) {
            bson_t doc;
            uint32_t len;
            const uint8_t *data;
            bson_iter_document(&di, &len, &data);
            bson_init_static(&doc, data, len);
            ASSERT_INT_EQ(shl_sorter_add(s, &doc, &st), 0);
        }
        shl_sorter_finish(s);
        bson_append_array_begin(&ids, "ids", 3, &arr);
        while ((d = shl_sorter_next(s)) != NULL) {
            char key[16];
            bson_iter_t idi;
            snprintf(key, sizeof(key), "%d", k++);
            bson_iter_init_find(&idi, d, "_id");
            bson_append_value(&arr, key, -1, bson_iter_value(&idi));
        }
        bson_append_array_end(&ids, &arr);
        ASSERT_BSON_EQ(&ids, coll_sorts[i].want);
        shl_sorter_destroy(s);
        shl_sort_pattern_destroy(p);
        shl_collator_release(coll);
        bson_destroy(&ids);
        bson_destroy(docs);
        bson_destroy(spec);
        bson_destroy(cspec);
    }
}
