/*
 * update_diff_test.c -- $v:2 update diffs: computed from two documents (table: before, after,
 * diff), applied back to 'before' (must give 'after' exactly), and described as change
 * streams report them (MongoDB 7.0's updateDescription, disambiguatedPaths included).
 */
#include "base/unit_test.h"
#include "bson/update_diff.h"

/* The diff of before -> after is 'want'; applying it to 'before' gives 'after'; and its
 * description (with disambiguatedPaths) is 'desc'. */
static void
check(const char *before, const char *after, const char *want, const char *desc)
{
    bson_t *b = shl_test_bson(before), *a = shl_test_bson(after);
    bson_t diff = BSON_INITIALIZER, applied, d = BSON_INITIALIZER;

    shl_update_diff_compute(b, a, &diff);
    ASSERT_BSON_EQ(&diff, want);
    ASSERT(shl_update_diff_apply(b, &diff, &applied));
    ASSERT_BSON_EQ(&applied, after);
    /* Idempotent: applying it again changes nothing. */
    {
        bson_t again;
        ASSERT(shl_update_diff_apply(&applied, &diff, &again));
        ASSERT_BSON_EQ(&again, after);
        bson_destroy(&again);
    }
    shl_update_diff_describe(&diff, true, &d);
    ASSERT_BSON_EQ(&d, desc);
    bson_destroy(&d);
    bson_destroy(&applied);
    bson_destroy(&diff);
    bson_destroy(a);
    bson_destroy(b);
}

#define NONE "'removedFields': [], 'truncatedArrays': [], 'disambiguatedPaths': {}"

SHL_TEST(update_diff_table)
{
    check("{'_id': 1, 'a': 1}", "{'_id': 1, 'a': 2}", "{'u': {'a': 2}}",
          "{'updatedFields': {'a': 2}, " NONE "}");
    check("{'_id': 1, 'a': 1, 'b': 2}", "{'_id': 1, 'b': 2, 'c': 3}",
          "{'d': {'a': false}, 'i': {'c': 3}}",
          "{'updatedFields': {'c': 3}, 'removedFields': ['a'], 'truncatedArrays': [], "
          "'disambiguatedPaths': {}}");
    check("{'_id': 1, 'a': {'x': 1, 'y': 2}}", "{'_id': 1, 'a': {'x': 5}}",
          "{'sa': {'d': {'y': false}, 'u': {'x': 5}}}",
          "{'updatedFields': {'a.x': 5}, 'removedFields': ['a.y'], 'truncatedArrays': [], "
          "'disambiguatedPaths': {}}");
    check("{'_id': 1, 'a': [1, 2, 3]}", "{'_id': 1, 'a': [1, 9]}",
          "{'sa': {'a': true, 'l': 2, 'u1': 9}}",
          "{'updatedFields': {'a.1': 9}, 'removedFields': [], "
          "'truncatedArrays': [{'field': 'a', 'newSize': 2}], 'disambiguatedPaths': {}}");
    check("{'_id': 1, 'a': [1]}", "{'_id': 1, 'a': [1, 2]}", "{'sa': {'a': true, 'u1': 2}}",
          "{'updatedFields': {'a.1': 2}, " NONE "}");
    check("{'_id': 1, 'a': 1}", "{'_id': 1, 'a': 1.0}", "{'u': {'a': 1.0}}",
          "{'updatedFields': {'a': 1.0}, " NONE "}");
    /* A field that moves is removed from its place and inserted at the end. */
    check("{'_id': 1, 'x': 1, 'y': 2, 'z': 3}", "{'_id': 1, 'x': 1, 'z': 3, 'y': 2}",
          "{'i': {'z': 3, 'y': 2}}", "{'updatedFields': {'z': 3, 'y': 2}, " NONE "}");
    /* A new field in the middle moves the fields after it too. */
    check("{'_id': 1, 'x': 1, 'y': 2}", "{'_id': 1, 'n': 0, 'x': 1, 'y': 3}",
          "{'i': {'n': 0, 'x': 1, 'y': 3}}", "{'updatedFields': {'n': 0, 'x': 1, 'y': 3}, " NONE "}");
    /* Nested arrays and documents, another type. */
    check("{'_id': 1, 'a': [{'b': 1}, [1, 2]], 'c': 'x'}",
          "{'_id': 1, 'a': [{'b': 2}, [1]], 'c': {'k': 1}}",
          "{'u': {'c': {'k': 1}}, 'sa': {'a': true, 's0': {'u': {'b': 2}}, 's1': {'a': true, "
          "'l': 1}}}",
          "{'updatedFields': {'c': {'k': 1}, 'a.0.b': 2}, 'removedFields': [], "
          "'truncatedArrays': [{'field': 'a.1', 'newSize': 1}], 'disambiguatedPaths': {}}");
    /* MongoDB 7.0's disambiguatedPaths: numeric and dotted field names, not array indexes. */
    check("{'_id': 1, 'o': {'0': {'1': 'n'}}, 'arr': [[{'0': 'n'}]]}",
          "{'_id': 1, 'o': {'0': {'1': 'u'}}, 'arr': [[{'0': 'n', '1': 2}]]}",
          "{'so': {'s0': {'u': {'1': 'u'}}}, 'sarr': {'a': true, 's0': {'a': true, 's0': {'i': "
          "{'1': 2}}}}}",
          "{'updatedFields': {'o.0.1': 'u', 'arr.0.0.1': 2}, 'removedFields': [], "
          "'truncatedArrays': [], 'disambiguatedPaths': {'o.0.1': ['o', '0', '1'], "
          "'arr.0.0.1': ['arr', 0, 0, '1']}}");
    check("{'_id': 1}", "{'_id': 1, 'new.Field.': 1}", "{'i': {'new.Field.': 1}}",
          "{'updatedFields': {'new.Field.': 1}, 'removedFields': [], 'truncatedArrays': [], "
          "'disambiguatedPaths': {'new.Field.': ['new.Field.']}}");
    check("{'_id': 1, 'a': 1}", "{'_id': 1, 'a': 1}", "{}", "{'updatedFields': {}, " NONE "}");
}

SHL_TEST(update_diff_entry_and_malformed)
{
    bson_t *pre = shl_test_bson("{'_id': 1, 'a': [1, 2], 's': {'t': 1}}");
    bson_t *bad = shl_test_bson("{'x': {'a': 1}}");
    bson_t *bad_arr = shl_test_bson("{'sa': {'a': true, 'q': 1}}");
    bson_t *grow = shl_test_bson("{'sa': {'a': true, 'u4': 5}, 'ss': {'a': true, 'u0': 1}}");
    bson_t *post = shl_test_bson("{'_id': 1, 'a': [1, 2], 's': {'t': 2}}");
    bson_t o = BSON_INITIALIZER, diff, out;

    shl_update_diff_entry_o(pre, post, &o);
    ASSERT_BSON_EQ(&o, "{'$v': 2, 'diff': {'ss': {'u': {'t': 2}}}}");
    ASSERT(shl_update_diff_of(&o, &diff));
    ASSERT_BSON_EQ(&diff, "{'ss': {'u': {'t': 2}}}");
    ASSERT(!shl_update_diff_of(post, &diff));
    ASSERT(!shl_update_diff_apply(pre, bad, &out));
    ASSERT_BSON_EQ(&out, "{}");
    bson_destroy(&out);
    ASSERT(!shl_update_diff_apply(pre, bad_arr, &out));
    bson_destroy(&out);
    /* An update past the end pads with nulls; a sub-diff of another type is left alone. */
    ASSERT(shl_update_diff_apply(pre, grow, &out));
    ASSERT_BSON_EQ(&out, "{'_id': 1, 'a': [1, 2, null, null, 5], 's': {'t': 1}}");
    bson_destroy(&out);
    bson_destroy(&o);
    bson_destroy(pre);
    bson_destroy(bad);
    bson_destroy(bad_arr);
    bson_destroy(grow);
    bson_destroy(post);
}
