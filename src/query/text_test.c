/*
 * text_test.c -- text search (text.h): index specs, tokenising with folding, stop words and
 * stemming, $search's terms/phrases/negations, matching and scores.
 */
#include <math.h>
#include <string.h>

#include "base/unit_test.h"
#include "bson/bson_test_util.h"
#include "query/text.h"

static shl_text_index_t *
tindex(const char *json)
{
    shl_status_t st = SHL_STATUS_INIT;
    shl_text_index_t *ti = NULL;
    bson_t *spec = shl_test_bson(json);
    if (shl_text_index_new(spec, &ti, &st) != 0) {
        fprintf(stderr, "text index %s: %s\n", json, st.reason);
    }
    bson_destroy(spec);
    return ti;
}

static int
tindex_code(const char *json)
{
    shl_status_t st = SHL_STATUS_INIT;
    shl_text_index_t *ti = NULL;
    bson_t *spec = shl_test_bson(json);
    int code = shl_text_index_new(spec, &ti, &st);
    shl_text_index_destroy(ti);
    bson_destroy(spec);
    return code;
}

/* Whether 'doc' matches $text 'text' over 'ti' (-1: the query is refused); *score set. */
static int
tmatch(const shl_text_index_t *ti, const char *text, const char *doc, double *score)
{
    shl_status_t st = SHL_STATUS_INIT;
    shl_text_query_t *q = NULL;
    bson_t *t = shl_test_bson(text);
    bson_t *d = shl_test_bson(doc);
    bson_iter_t it;
    bool m = false;
    int r = -1;
    *score = 0;
    if (bson_iter_init_find(&it, t, "t") &&
        shl_text_query_new(bson_iter_value(&it), ti, &q, &st) == 0 &&
        shl_text_query_match(q, d, &m, score, &st) == 0) {
        r = m ? 1 : 0;
    }
    shl_text_query_destroy(q);
    bson_destroy(t);
    bson_destroy(d);
    return r;
}

SHL_TEST(text_index_specs)
{
    ASSERT_INT_EQ(tindex_code("{'key': {'a': 'text'}}"), 0);
    ASSERT_INT_EQ(tindex_code("{'key': {'p': 1, 'a': 'text', 'b': 'text', 's': 1}}"), 0);
    ASSERT_INT_EQ(tindex_code("{'key': {'$**': 'text'}, 'weights': {'a': 5}}"), 0);
    ASSERT_INT_EQ(tindex_code("{'key': {'a': 'text'}, 'weights': {'a': 0}}"), 67);
    ASSERT_INT_EQ(tindex_code("{'key': {'a': 'text'}, 'weights': {'a': 100000}}"), 67);
    ASSERT_INT_EQ(tindex_code("{'key': {'a': 'text'}, 'weights': {'a': 'x'}}"), 67);
    ASSERT_INT_EQ(tindex_code("{'key': {'a': 'text'}, 'default_language': 'klingon'}"), 17262);
    ASSERT_INT_EQ(tindex_code("{'key': {'a': 'text'}, 'textIndexVersion': 2}"), 67);

    shl_text_index_t *ti = tindex("{'key': {'p': 1, 'a': 'text', 's': 1}, 'weights': {'b': 2.5}, "
                                  "'default_language': 'fr', 'language_override': 'lang'}");
    ASSERT(ti != NULL);
    bson_t out = BSON_INITIALIZER;
    shl_text_index_append_normalized(ti, &out);
    ASSERT_BSON_EQ(&out, "{'key': {'p': 1.0, '_fts': 'text', '_ftsx': 1, 's': 1.0}, "
                         "'weights': {'a': 1, 'b': 2.5}, 'default_language': 'fr', "
                         "'language_override': 'lang', 'textIndexVersion': 3}");
    bson_destroy(&out);
    shl_text_index_destroy(ti);
}

SHL_TEST(text_search_terms_phrases_negations)
{
    shl_text_index_t *ti = tindex("{'key': {'t': 'text', 'tags': 'text'}}");
    double s;
    ASSERT(ti != NULL);
    /* stemming (running ~ runs), case and diacritic folding, stop words */
    ASSERT_INT_EQ(tmatch(ti, "{'t': {'$search': 'RUNS'}}", "{'t': 'I was running home'}", &s), 1);
    ASSERT(s > 0);
    ASSERT_INT_EQ(tmatch(ti, "{'t': {'$search': 'cafe'}}", "{'t': 'Le Caf\\u00e9'}", &s), 1);
    ASSERT_INT_EQ(tmatch(ti, "{'t': {'$search': 'the'}}", "{'t': 'the end'}", &s), 0);
    ASSERT_INT_EQ(tmatch(ti, "{'t': {'$search': 'home'}}", "{'t': 'away'}", &s), 0);
    /* arrays of strings */
    ASSERT_INT_EQ(tmatch(ti, "{'t': {'$search': 'blue'}}", "{'tags': ['red', 'Blue']}", &s), 1);
    /* phrases must all be present, negations none */
    ASSERT_INT_EQ(
        tmatch(ti, "{'t': {'$search': '\\\"coffee shop\\\"'}}", "{'t': 'a Coffee Shop here'}", &s),
        1);
    ASSERT_INT_EQ(
        tmatch(ti, "{'t': {'$search': '\\\"coffee shop\\\"'}}", "{'t': 'shop for coffee'}", &s), 0);
    ASSERT_INT_EQ(tmatch(ti, "{'t': {'$search': 'coffee -tea'}}", "{'t': 'coffee and tea'}", &s),
                  0);
    ASSERT_INT_EQ(tmatch(ti, "{'t': {'$search': 'coffee -tea'}}", "{'t': 'coffee only'}", &s), 1);
    ASSERT_INT_EQ(
        tmatch(ti, "{'t': {'$search': 'coffee -\\\"iced coffee\\\"'}}", "{'t': 'iced coffee'}", &s),
        0);
    ASSERT_INT_EQ(tmatch(ti, "{'t': {'$search': 'co-op'}}", "{'t': 'op'}", &s), 1);
    ASSERT_INT_EQ(tmatch(ti, "{'t': {'$search': '-coffee'}}", "{'t': 'tea'}", &s), 0);
    /* sensitivity options */
    ASSERT_INT_EQ(
        tmatch(ti, "{'t': {'$search': 'Coffee', '$caseSensitive': true}}", "{'t': 'coffee'}", &s),
        0);
    ASSERT_INT_EQ(
        tmatch(ti, "{'t': {'$search': 'Coffee', '$caseSensitive': true}}", "{'t': 'Coffee'}", &s),
        1);
    ASSERT_INT_EQ(tmatch(ti, "{'t': {'$search': 'cafe', '$diacriticSensitive': true}}",
                         "{'t': 'caf\\u00e9'}", &s),
                  0);
    /* bad queries */
    ASSERT_INT_EQ(tmatch(ti, "{'t': {'$search': 1}}", "{}", &s), -1);
    ASSERT_INT_EQ(tmatch(ti, "{'t': {'$search': 'a', '$language': 'xx'}}", "{}", &s), -1);
    ASSERT_INT_EQ(tmatch(ti, "{'t': {'$search': 'a', 'x': 1}}", "{}", &s), -1);
    shl_text_index_destroy(ti);
}

SHL_TEST(text_scores_and_languages)
{
    shl_text_index_t *ti = tindex("{'key': {'title': 'text', 'body': 'text'}, "
                                  "'weights': {'title': 10}}");
    double a, b, c;
    ASSERT(ti != NULL);
    /* a weighted field scores higher; a repeated term scores more, damped */
    ASSERT_INT_EQ(tmatch(ti, "{'t': {'$search': 'apple'}}", "{'title': 'apple pie'}", &a), 1);
    ASSERT_INT_EQ(tmatch(ti, "{'t': {'$search': 'apple'}}", "{'body': 'apple pie'}", &b), 1);
    ASSERT(a > b);
    ASSERT(fabs(b - 0.75) < 1e-9); /* 1 * freq 1 * (0.5 * 1/2 + 0.5) */
    ASSERT_INT_EQ(tmatch(ti, "{'t': {'$search': 'apple'}}", "{'body': 'apple apple pie'}", &c), 1);
    ASSERT(c > b && c < 2 * b);
    ASSERT_INT_EQ(tmatch(ti, "{'t': {'$search': 'apple'}}", "{'body': 'Apple'}", &c), 1);
    ASSERT(fabs(c - 1.0) < 1e-9); /* one term of one: coefficient 1 */
    ASSERT_INT_EQ(tmatch(ti, "{'t': {'$search': 'pie'}}", "{'body': 'Pie'}", &c), 1);
    ASSERT(fabs(c - 1.1) < 1e-9); /* the term is the whole string: 1.1 times */
    /* a case- or diacritic-sensitive query scores as an insensitive one */
    ASSERT_INT_EQ(
        tmatch(ti, "{'t': {'$search': 'Pie', '$caseSensitive': true}}", "{'body': 'Pie'}", &c), 1);
    ASSERT(fabs(c - 1.1) < 1e-9);
    ASSERT_INT_EQ(
        tmatch(ti, "{'t': {'$search': 'Pie', '$caseSensitive': true}}", "{'body': 'pie'}", &c), 0);
    /* a document's language_override field picks its stemmer */
    ASSERT_INT_EQ(tmatch(ti, "{'t': {'$search': 'pommes', '$language': 'french'}}",
                         "{'body': 'pomme', 'language': 'french'}", &c),
                  1);
    shl_text_index_destroy(ti);
}

SHL_TEST(text_stop_words_of_other_languages)
{
    shl_text_index_t *ti = tindex("{'key': {'t': 'text'}, 'default_language': 'french'}");
    double s;
    ASSERT(ti != NULL);
    /* French stop words (with or without their diacritics, any case) match nothing */
    ASSERT_INT_EQ(tmatch(ti, "{'t': {'$search': 'le'}}", "{'t': 'le pommes'}", &s), 0);
    ASSERT_INT_EQ(tmatch(ti, "{'t': {'$search': 'ETE'}}", "{'t': 'il a été là'}", &s), 0);
    ASSERT_INT_EQ(tmatch(ti, "{'t': {'$search': 'pommes'}}", "{'t': 'le pommes'}", &s), 1);
    ASSERT(fabs(s - 1.0) < 1e-9); /* 'le' is no term: 'pomm' is one of one */
    /* German and Russian lists; English's words are not French stop words */
    ASSERT_INT_EQ(tmatch(ti, "{'t': {'$search': 'und', '$language': 'german'}}",
                         "{'t': 'Brot und Butter', 'language': 'german'}", &s),
                  0);
    ASSERT_INT_EQ(tmatch(ti, "{'t': {'$search': 'и', '$language': 'russian'}}",
                         "{'t': 'хлеб и масло', 'language': 'russian'}", &s),
                  0);
    ASSERT_INT_EQ(tmatch(ti, "{'t': {'$search': 'the'}}", "{'t': 'the'}", &s), 1);
    shl_text_index_destroy(ti);
}

SHL_TEST(text_score_field_and_find)
{
    bson_t *f = shl_test_bson("{'a': 1, '$and': [{'b': 2}, {'$text': {'$search': 'x'}}]}");
    bson_t *sort = shl_test_bson("{'s': {'$meta': 'textScore'}}");
    bson_t *plain = shl_test_bson("{'s': {'x': 1}}");
    bson_t doc = BSON_INITIALIZER, out;
    bson_value_t v;
    double score = 0;
    int n = 0;
    bool in_or = true;
    shl_text_find(f, &v, &n, &in_or);
    ASSERT_INT_EQ(n, 1);
    ASSERT(!in_or);
    ASSERT(v.value_type == BSON_TYPE_DOCUMENT);
    ASSERT(shl_text_score_wanted(sort) && !shl_text_score_wanted(plain));
    BSON_APPEND_INT32(&doc, "a", 1);
    ASSERT(!shl_text_score_get(&doc, &score) && !shl_text_score_strip(&doc, &out));
    BSON_APPEND_DOUBLE(&doc, SHL_TEXT_SCORE_FIELD, 2.5);
    ASSERT(shl_text_score_get(&doc, &score) && score == 2.5);
    ASSERT(shl_text_score_strip(&doc, &out));
    ASSERT_INT_EQ((int)bson_count_keys(&out), 1);
    bson_destroy(&out);
    bson_destroy(&doc);
    bson_destroy(f);
    bson_destroy(sort);
    bson_destroy(plain);
}
