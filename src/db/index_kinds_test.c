/*
 * index_kinds_test.c -- the node's key generators without a server: hashed keys are the
 * KeyString of MongoDB's hash as a NumberLong (compound and missing fields included),
 * arrays on a hashed path fail with 16766, partial filters skip documents, sparse
 * hashed skips documents missing every field, and spec validation codes.
 */
#include <string.h>

#include "base/unit_test.h"
#include "bson/bson_hash.h"
#include "bson/keystring.h"
#include "db/index_kinds.h"

/* Keys of 'doc' under the index 'spec' (both '-quoted JSON); returns gen's code. */
static int
gen(const char *spec_json, const char *doc_json, shl_keyset_t *keys, shl_status_t *st)
{
    bson_t *spec = shl_test_bson(spec_json), *doc = shl_test_bson(doc_json);
    shl_keygen_t *kg = NULL;
    int ret = db_keygen_factory(spec, &kg, st);
    shl_keyset_clear(keys);
    if (ret == 0) {
        ret = kg->gen(kg, doc, keys, st);
        kg->destroy(kg);
    }
    bson_destroy(spec);
    bson_destroy(doc);
    return ret;
}

static bool
key_is(const shl_keyset_t *keys, size_t i, const shl_keystring_t *want)
{
    size_t len;
    const uint8_t *k = shl_keyset_key(keys, i, &len);
    return len == want->len && memcmp(k, want->data, len) == 0;
}

static void
hash_key(shl_keystring_t *ks, const bson_value_t *v)
{
    bson_value_t h = {.value_type = BSON_TYPE_INT64};
    h.value.v_int64 = shl_bson_hash_value(v, SHL_BSON_HASH_DEFAULT_SEED);
    shl_keystring_append_value(ks, &h, false);
}

SHL_TEST(keygen_hashed)
{
    shl_keyset_t keys;
    shl_status_t st;
    shl_keystring_t want;
    bson_value_t v = {.value_type = BSON_TYPE_INT32};

    shl_keyset_init(&keys);
    shl_keystring_init(&want);
    v.value.v_int32 = 5;
    ASSERT_INT_EQ(gen("{'key': {'a.b': 'hashed'}, 'name': 'x'}", "{'a': {'b': 5}}", &keys, &st), 0);
    hash_key(&want, &v);
    ASSERT_INT_EQ((int)keys.n, 1);
    ASSERT(key_is(&keys, 0, &want));
    /* Missing: the hash of null. */
    shl_keystring_reset(&want);
    v.value_type = BSON_TYPE_NULL;
    hash_key(&want, &v);
    ASSERT_INT_EQ(gen("{'key': {'a.b': 'hashed'}, 'name': 'x'}", "{'a': 1}", &keys, &st), 0);
    ASSERT(key_is(&keys, 0, &want));
    /* Compound: the hashed component, then a multikey field's elements. */
    ASSERT_INT_EQ(gen("{'key': {'h': 'hashed', 't': 1}, 'name': 'x'}", "{'h': null, 't': [1, 2]}",
                      &keys, &st),
                  0);
    ASSERT_INT_EQ((int)keys.n, 2);
    /* Arrays on the hashed path. */
    ASSERT_INT_EQ(gen("{'key': {'a.b': 'hashed'}, 'name': 'x'}", "{'a': [{'b': 1}]}", &keys, &st),
                  16766);
    ASSERT_INT_EQ(gen("{'key': {'a': 'hashed'}, 'name': 'x'}", "{'a': [1]}", &keys, &st), 16766);
    /* Sparse: nothing when every key field is missing. */
    ASSERT_INT_EQ(gen("{'key': {'a': 'hashed', 'b': 1}, 'name': 'x', 'sparse': true}", "{'c': 1}",
                      &keys, &st),
                  0);
    ASSERT_INT_EQ((int)keys.n, 0);
    ASSERT_INT_EQ(gen("{'key': {'a': 'hashed', 'b': 1}, 'name': 'x', 'sparse': true}", "{'b': 1}",
                      &keys, &st),
                  0);
    ASSERT_INT_EQ((int)keys.n, 1);
    shl_keystring_cleanup(&want);
    shl_keyset_cleanup(&keys);
}

SHL_TEST(keygen_partial)
{
    shl_keyset_t keys;
    shl_status_t st;
    const char *spec =
        "{'key': {'a': 1}, 'name': 'x', 'partialFilterExpression': {'b': {'$gt': 1}}}";

    shl_keyset_init(&keys);
    ASSERT_INT_EQ(gen(spec, "{'a': 1, 'b': 2}", &keys, &st), 0);
    ASSERT_INT_EQ((int)keys.n, 1);
    ASSERT_INT_EQ(gen(spec, "{'a': 1, 'b': 1}", &keys, &st), 0);
    ASSERT_INT_EQ((int)keys.n, 0);
    ASSERT_INT_EQ(gen(spec, "{'a': 1}", &keys, &st), 0);
    ASSERT_INT_EQ((int)keys.n, 0);
    /* A bad filter fails the factory with the matcher's error. */
    ASSERT_INT_EQ(gen("{'key': {'a': 1}, 'name': 'x', 'partialFilterExpression': {'b': {'$x': 1}}}",
                      "{}", &keys, &st),
                  2);
    shl_keyset_cleanup(&keys);
}

static int
validate(const char *spec_json, shl_status_t *st)
{
    bson_t *spec = shl_test_bson(spec_json);
    int ret = db_index_spec_validate(spec, st);
    bson_destroy(spec);
    return ret;
}

SHL_TEST(index_spec_validation)
{
    shl_status_t st;
    ASSERT_INT_EQ(validate("{'key': {'a': 1}, 'name': 'x', 'unique': true, 'sparse': true}", &st),
                  0);
    ASSERT_INT_EQ(validate("{'key': {'a': 1}, 'name': 'x', 'foo': 1}", &st), 197);
    ASSERT_INT_EQ(validate("{'key': {'a': 0}, 'name': 'x'}", &st), 67);
    ASSERT_INT_EQ(validate("{'key': {'a': 'hashed', 'b': 'hashed'}, 'name': 'x'}", &st), 31303);
    ASSERT_INT_EQ(validate("{'key': {'a': 'hashed'}, 'name': 'x', 'unique': true}", &st), 16764);
    ASSERT_INT_EQ(validate("{'key': {'a': 1, 'a': -1}, 'name': 'x'}", &st), 2);
    ASSERT_INT_EQ(
        validate("{'key': {'a': 1}, 'name': 'x', 'partialFilterExpression': {'b': {'$ne': 1}}}",
                 &st),
        67);
    ASSERT_INT_EQ(validate("{'key': {'a': 1}, 'name': 'x', 'expireAfterSeconds': -5}", &st), 67);
    {
        bson_t *spec = shl_test_bson("{'key': {'t': 1}, 'name': 'x', 'expireAfterSeconds': 30}");
        int64_t secs = 0;
        const char *field = NULL;
        ASSERT(db_index_ttl_seconds(spec, &secs, &field));
        ASSERT_INT_EQ((int)secs, 30);
        ASSERT_STR_EQ(field, "t");
        bson_destroy(spec);
    }
}
