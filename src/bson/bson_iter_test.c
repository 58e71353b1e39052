/*
 * bson_iter_test.c -- shl_iter_next leaves a bson_iter_t exactly as libbson's bson_iter_next
 * does: same fields after every step, same answer at the end, on a document holding every
 * BSON type and on many corrupted copies of it (bytes flipped, lengths changed, cut short).
 */
#include <stdlib.h>

#include "base/unit_test.h"
#include "bson/bson_iter.h"

/* Whether two iterators are in the same state (the value cache is libbson's own). */
static bool
same_state(const bson_iter_t *a, const bson_iter_t *b)
{
    return a->raw == b->raw && a->len == b->len && a->off == b->off && a->type == b->type &&
           a->key == b->key && a->d1 == b->d1 && a->d2 == b->d2 && a->d3 == b->d3 &&
           a->d4 == b->d4 && a->next_off == b->next_off && a->err_off == b->err_off;
}

/* Step both iterators over data[0..len) to the end; false at the first difference. */
static bool
steps_agree(const uint8_t *data, uint32_t len, int *elements)
{
    bson_iter_t lib, ours;
    bool more_lib = true, more_ours = true, same = true;

    memset(&lib, 0, sizeof(lib));
    lib.raw = data;
    lib.len = len;
    lib.next_off = 4;
    ours = lib;
    *elements = 0;
    while (same && more_lib) {
        more_lib = bson_iter_next(&lib);
        more_ours = shl_iter_next(&ours);
        same = more_lib == more_ours && same_state(&lib, &ours);
        if (!same && getenv("SHL_ITER_DEBUG") != NULL) {
            fprintf(stderr, "lib %d off %u type %u key %u d %u %u %u %u next %u err %u raw %p\n",
                    more_lib, lib.off, lib.type, lib.key, lib.d1, lib.d2, lib.d3, lib.d4,
                    lib.next_off, lib.err_off, (const void *)lib.raw);
            fprintf(stderr, "our %d off %u type %u key %u d %u %u %u %u next %u err %u raw %p\n",
                    more_ours, ours.off, ours.type, ours.key, ours.d1, ours.d2, ours.d3, ours.d4,
                    ours.next_off, ours.err_off, (const void *)ours.raw);
        }
        if (same && more_lib) {
            same = shl_iter_type(&ours) == bson_iter_type(&lib) &&
                   shl_iter_key_len(&ours) == bson_iter_key_len(&lib) &&
                   strcmp(shl_iter_key(&ours), bson_iter_key(&lib)) == 0;
            (*elements)++;
        }
    }
    return same;
}

static bson_t *
every_type(void)
{
    bson_t *doc = bson_new(), child = BSON_INITIALIZER, arr = BSON_INITIALIZER;
    bson_oid_t oid;
    bson_decimal128_t dec = {.high = 0x3040000000000000ull, .low = 7};
    static const uint8_t bin[] = {1, 2, 3, 4, 5};

    bson_oid_init_from_string(&oid, "0123456789abcdef01234567");
    BSON_APPEND_DOUBLE(doc, "double", 1.5);
    BSON_APPEND_UTF8(doc, "utf8", "hello");
    BSON_APPEND_UTF8(doc, "", "empty key");
    BSON_APPEND_INT32(&child, "a", 1);
    BSON_APPEND_DOCUMENT(doc, "document", &child);
    BSON_APPEND_INT32(&arr, "0", 1);
    BSON_APPEND_ARRAY(doc, "array", &arr);
    BSON_APPEND_BINARY(doc, "binary", BSON_SUBTYPE_BINARY, bin, sizeof(bin));
    BSON_APPEND_BINARY(doc, "binary_old", BSON_SUBTYPE_BINARY_DEPRECATED, bin, sizeof(bin));
    BSON_APPEND_UNDEFINED(doc, "undefined");
    BSON_APPEND_OID(doc, "oid", &oid);
    BSON_APPEND_BOOL(doc, "bool", true);
    BSON_APPEND_DATE_TIME(doc, "date", 86400000);
    BSON_APPEND_NULL(doc, "null");
    BSON_APPEND_REGEX(doc, "regex", "^a.*b$", "im");
    BSON_APPEND_DBPOINTER(doc, "dbpointer", "db.coll", &oid);
    BSON_APPEND_CODE(doc, "code", "function () {}");
    BSON_APPEND_SYMBOL(doc, "symbol", "sym");
    BSON_APPEND_CODE_WITH_SCOPE(doc, "codewscope", "function () { return x; }", &child);
    BSON_APPEND_INT32(doc, "int32", -7);
    BSON_APPEND_TIMESTAMP(doc, "timestamp", 5, 6);
    BSON_APPEND_INT64(doc, "int64", 1ll << 40);
    BSON_APPEND_DECIMAL128(doc, "decimal", &dec);
    BSON_APPEND_MAXKEY(doc, "max");
    BSON_APPEND_MINKEY(doc, "min");
    bson_destroy(&child);
    bson_destroy(&arr);
    return doc;
}

SHL_TEST(iter_next_matches_libbson_on_every_type)
{
    bson_t *doc = every_type();
    int n = 0;

    ASSERT(steps_agree(bson_get_data(doc), doc->len, &n));
    ASSERT_INT_EQ(n, 23);
    bson_destroy(doc);
}

SHL_TEST(iter_next_matches_libbson_on_corrupt_documents)
{
    bson_t *doc = every_type();
    uint32_t len = doc->len;
    uint8_t *copy = bson_malloc(len);
    static const uint8_t values[] = {0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x0c, 0x0d,
                                     0x0f, 0x13, 0x20, 0x7f, 0x80, 0xfe, 0xff};
    uint64_t x = 88172645463325252ull;
    int n;

    /* Every byte set to each interesting value, one at a time. */
    for (uint32_t i = 4; i < len; i++) {
        for (size_t v = 0; v < sizeof(values); v++) {
            memcpy(copy, bson_get_data(doc), len);
            copy[i] = values[v];
            if (!steps_agree(copy, len, &n)) {
                shl_test_fail_here(__FILE__, __LINE__, "byte %u set to 0x%02x", i, values[v]);
                return;
            }
        }
    }
    /* Cut short at every length (the declared length kept). */
    for (uint32_t cut = 5; cut < len; cut++) {
        if (!steps_agree(bson_get_data(doc), cut, &n)) {
            shl_test_fail_here(__FILE__, __LINE__, "cut at %u", cut);
            return;
        }
    }
    /* Random bytes in random places, a few at a time. */
    for (int round = 0; round < 20000; round++) {
        memcpy(copy, bson_get_data(doc), len);
        for (int k = 0; k < 3; k++) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            copy[4 + x % (len - 4)] = (uint8_t)(x >> 32);
        }
        if (!steps_agree(copy, len, &n)) {
            shl_test_fail_here(__FILE__, __LINE__, "random round %d", round);
            return;
        }
    }
    bson_free(copy);
    bson_destroy(doc);
}
