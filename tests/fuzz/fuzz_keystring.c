/*
 * fuzz_keystring.c -- libFuzzer target for the index key encoding (src/bson/keystring.c):
 * decoding arbitrary bytes must not crash; for an input that is a valid BSON document,
 * every field value must round-trip (decode(encode(v)) compares equal to v) in both
 * directions, and memcmp order of two encodings must agree with shl_bson_value_compare.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bson/bson_compare.h"
#include "bson/keystring.h"
#include "fuzz_walk.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_VALUES 16

static int
sign(int x)
{
    return (x > 0) - (x < 0);
}

static void
fail(const char *what, const bson_value_t *a, const bson_value_t *b)
{
    fprintf(stderr, "fuzz_keystring: %s (types 0x%02x, 0x%02x)\n", what, (unsigned)a->value_type,
            b ? (unsigned)b->value_type : 0u);
    abort();
}

/*
 * True if every array inside 'it''s container (recursively, scopes included) has the
 * keys "0", "1", ... in order. Keys encode only an array's values (as MongoDB's do), so
 * an array with other keys decodes renumbered and may compare differently: such input
 * is out of scope here.
 */
static bool
arrays_canonical(bson_iter_t *it, bool is_array)
{
    unsigned i = 0;
    while (bson_iter_next(it)) {
        bson_iter_t child;
        char want[16];
        snprintf(want, sizeof(want), "%u", i++);
        if (is_array && strcmp(bson_iter_key(it), want) != 0) {
            return false;
        }
        if ((BSON_ITER_HOLDS_DOCUMENT(it) || BSON_ITER_HOLDS_ARRAY(it)) &&
            bson_iter_recurse(it, &child) && !arrays_canonical(&child, BSON_ITER_HOLDS_ARRAY(it))) {
            return false;
        }
        if (BSON_ITER_HOLDS_CODEWSCOPE(it)) {
            uint32_t len, slen;
            const uint8_t *scope;
            bson_t sdoc;
            (void)bson_iter_codewscope(it, &len, &slen, &scope);
            if (bson_init_static(&sdoc, scope, slen) && bson_iter_init(&child, &sdoc) &&
                !arrays_canonical(&child, false)) {
                return false;
            }
        }
    }
    return true;
}

/* Decode 'ks' as one field and check the value compares equal to 'v'. */
static void
check_round_trip(const shl_keystring_t *ks, const bson_value_t *v, bool desc)
{
    bson_t out;
    bson_iter_t it;
    int64_t rid = 0;

    if (!shl_keystring_decode(ks->data, ks->len, &desc, 1, &out, NULL)) {
        fail("decode of an encoded value failed", v, NULL);
    }
    if (!bson_iter_init(&it, &out) || !bson_iter_next(&it)) {
        fail("decode gave no value", v, NULL);
    }
    if (shl_bson_value_compare(bson_iter_value(&it), v) != 0) {
        fail("decode(encode(v)) != v", v, bson_iter_value(&it));
    }
    bson_destroy(&out);

    /* The same key followed by a RecordId. */
    {
        shl_keystring_t k2;
        shl_keystring_init(&k2);
        shl_keystring_append_value(&k2, v, desc);
        shl_keystring_append_record_id(&k2, -7);
        if (!shl_keystring_decode(k2.data, k2.len, &desc, 1, &out, &rid) || rid != -7) {
            fail("decode with a RecordId failed", v, NULL);
        }
        bson_destroy(&out);
        shl_keystring_cleanup(&k2);
    }
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    bson_t doc, out;
    bson_iter_t it;
    bson_value_t vals[MAX_VALUES];
    shl_keystring_t ks[MAX_VALUES];
    size_t n = 0;
    int64_t rid;
    bool desc[3] = {false, true, false};

    /* Arbitrary bytes as a key of 1..3 fields, with and without a RecordId. */
    for (size_t nf = 1; nf <= 3; nf++) {
        (void)shl_keystring_decode(data, size, desc, nf, &out, NULL);
        bson_destroy(&out);
        (void)shl_keystring_decode(data, size, NULL, nf, &out, &rid);
        bson_destroy(&out);
    }

    if (!bson_init_static(&doc, data, size) || !fuzz_walk_doc(&doc) ||
        !bson_validate(&doc, BSON_VALIDATE_NONE, NULL) || !bson_iter_init(&it, &doc) ||
        !arrays_canonical(&it, false) || !bson_iter_init(&it, &doc)) {
        return 0;
    }
    while (n < MAX_VALUES && bson_iter_next(&it)) {
        bson_value_copy(bson_iter_value(&it), &vals[n]);
        shl_keystring_init(&ks[n]);
        shl_keystring_append_value(&ks[n], &vals[n], false);
        check_round_trip(&ks[n], &vals[n], false);
        {
            shl_keystring_t d;
            shl_keystring_init(&d);
            shl_keystring_append_value(&d, &vals[n], true);
            check_round_trip(&d, &vals[n], true);
            shl_keystring_cleanup(&d);
        }
        n++;
    }
    for (size_t i = 0; i < n; i++) {
        for (size_t j = 0; j < n; j++) {
            int c = sign(shl_bson_value_compare(&vals[i], &vals[j]));
            int k = sign(shl_keystring_compare(ks[i].data, ks[i].len, ks[j].data, ks[j].len));
            if (c != k) {
                fprintf(stderr, "compare %d, keystring %d\n", c, k);
                fail("memcmp order disagrees with shl_bson_value_compare", &vals[i], &vals[j]);
            }
        }
    }
    for (size_t i = 0; i < n; i++) {
        bson_value_destroy(&vals[i]);
        shl_keystring_cleanup(&ks[i]);
    }
    return 0;
}
