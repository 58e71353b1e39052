/*
 * event_split_test.c -- splitting a change stream event into fragments: fields in order, as
 * many as fit, fragment tokens after the event's, resuming from a fragment, a field too large.
 */
#include <string.h>

#include "base/unit_test.h"
#include "bson/bson_util.h"
#include "bson/event_split.h"
#include "bson/resume_token.h"

/* An event {_id, operationType, a: <n 'a's>, b: <n 'b's>} with its token hex in *hex. */
static bson_t *
big_event(size_t n, char **hex)
{
    bson_t *key = shl_test_bson("{'_id': 7}");
    shl_resume_token_t t = {.cluster_time = ((uint64_t)100 << 32) | 3,
                            .version = SHL_RESUME_TOKEN_VERSION,
                            .token_type = SHL_RESUME_TOKEN_EVENT,
                            .event_id = key};
    bson_t *ev = bson_new();
    char *s = bson_malloc(n + 1);

    shl_resume_token_append(ev, "_id", &t);
    *hex = shl_resume_token_hex(&t);
    BSON_APPEND_UTF8(ev, "operationType", "update");
    memset(s, 'a', n);
    s[n] = '\0';
    BSON_APPEND_UTF8(ev, "a", s);
    memset(s, 'b', n);
    BSON_APPEND_UTF8(ev, "b", s);
    bson_free(s);
    bson_destroy(key);
    return ev;
}

static const char *
frag_hex(const bson_t *f)
{
    bson_t id;
    return shl_bson_get_subdoc(f, "_id", &id) ? shl_resume_token_doc_hex(&id) : NULL;
}

SHL_TEST(event_split_fields_in_order)
{
    char *hex;
    bson_t *ev = big_event(100 * 1024, &hex), **frags = NULL, **rest = NULL;
    size_t n = 0, nrest = 0;
    shl_status_t st;
    bson_iter_t it;

    shl_status_clear(&st);
    /* 64 KB of room for _id and splitEvent: one 100 KB field per 200 KB fragment. */
    ASSERT_INT_EQ(shl_event_split(ev, hex, NULL, 200 * 1024, &frags, &n, &st), 0);
    ASSERT_INT_EQ(n, 2);
    ASSERT(bson_iter_init_find(&it, frags[0], "operationType"));
    ASSERT(bson_iter_init_find(&it, frags[0], "a") && !bson_iter_init_find(&it, frags[0], "b"));
    ASSERT(bson_iter_init_find(&it, frags[1], "b") && !bson_has_field(frags[1], "operationType"));
    ASSERT(bson_iter_init_find(&it, frags[1], "splitEvent"));
    ASSERT(strcmp(frag_hex(frags[0]), hex) > 0 && strcmp(frag_hex(frags[1]), frag_hex(frags[0])) > 0);
    ASSERT(shl_event_is_fragment_of(frag_hex(frags[1]), hex));
    ASSERT(!shl_event_is_fragment_of(hex, hex));
    /* Resuming from the first fragment leaves it out. */
    ASSERT_INT_EQ(shl_event_split(ev, hex, frag_hex(frags[0]), 200 * 1024, &rest, &nrest, &st), 0);
    ASSERT_INT_EQ(nrest, 1);
    ASSERT_STR_EQ(frag_hex(rest[0]), frag_hex(frags[1]));
    for (size_t i = 0; i < n; i++) {
        bson_destroy(frags[i]);
    }
    bson_destroy(rest[0]);
    bson_free(frags);
    bson_free(rest);
    /* A field that alone does not fit: BSONObjectTooLarge. */
    ASSERT(shl_event_split(ev, hex, NULL, 150 * 1024, &frags, &n, &st) != 0);
    ASSERT_INT_EQ(st.code, 10334);
    bson_free(frags);
    bson_free(hex);
    bson_destroy(ev);
}
