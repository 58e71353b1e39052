/*
 * cursor_manager_test.c -- batching limits, pin/unpin, kill, reaping.
 */
#include "base/clock.h"
#include "base/unit_test.h"
#include "db/cursor_manager.h"

typedef struct vec_source {
    int n, pos;
    size_t doc_bytes;
    bson_t cur;
    bool *destroyed;
} vec_source_t;

static int
vec_next(void *state, shl_op_ctx_t *op, const bson_t **doc, shl_status_t *st)
{
    vec_source_t *v = state;
    (void)op;
    (void)st;
    *doc = NULL;
    if (v->pos >= v->n) {
        return 0;
    }
    bson_reinit(&v->cur);
    BSON_APPEND_INT32(&v->cur, "_id", v->pos++);
    if (v->doc_bytes > 0) {
        char *pad = bson_malloc(v->doc_bytes + 1);
        memset(pad, 'x', v->doc_bytes);
        pad[v->doc_bytes] = '\0';
        BSON_APPEND_UTF8(&v->cur, "pad", pad);
        bson_free(pad);
    }
    *doc = &v->cur;
    return 0;
}

static void
vec_destroy(void *state)
{
    vec_source_t *v = state;
    *v->destroyed = true;
    bson_destroy(&v->cur);
    bson_free(v);
}

static const shl_cursor_source_ops_t vec_ops = {vec_next, vec_destroy};

static shl_cursor_t *
make_cursor(int n, size_t doc_bytes, bool *destroyed)
{
    vec_source_t *v = bson_aligned_alloc0(BSON_ALIGNOF(vec_source_t), sizeof(*v));
    v->n = n;
    v->doc_bytes = doc_bytes;
    v->destroyed = destroyed;
    bson_init(&v->cur);
    *destroyed = false;
    return shl_cursor_new("test.c", &vec_ops, v);
}

static void
fake_op(shl_op_ctx_t *op, shl_service_ctx_t *svc)
{
    memset(op, 0, sizeof(*op));
    shl_service_ctx_init(svc, SHL_ROLE_STANDALONE);
    op->svc = svc;
}

SHL_TEST(first_batch_default_101_then_rest)
{
    shl_service_ctx_t svc;
    shl_op_ctx_t op;
    shl_status_t st;
    bool destroyed, exhausted;
    shl_cursor_t *c = make_cursor(250, 0, &destroyed);
    bson_t arr = BSON_INITIALIZER;

    fake_op(&op, &svc);
    ASSERT_INT_EQ(shl_cursor_fill_batch(&op, c, 0, true, &arr, &exhausted, &st), 0);
    ASSERT_INT_EQ(bson_count_keys(&arr), 101);
    ASSERT(!exhausted);
    bson_reinit(&arr);
    ASSERT_INT_EQ(shl_cursor_fill_batch(&op, c, 0, false, &arr, &exhausted, &st), 0);
    ASSERT_INT_EQ(bson_count_keys(&arr), 149);
    ASSERT(exhausted);
    shl_cursor_destroy(c);
    ASSERT(destroyed);
    bson_destroy(&arr);
}

SHL_TEST(batches_stop_at_16mib_and_stash)
{
    shl_service_ctx_t svc;
    shl_op_ctx_t op;
    shl_status_t st;
    bool destroyed, exhausted;
    /* 5 documents of ~5 MiB: 3 fit in 16 MiB, the 4th is stashed for the next batch. */
    shl_cursor_t *c = make_cursor(5, 5 * 1024 * 1024, &destroyed);
    bson_t arr = BSON_INITIALIZER;
    bson_iter_t it;

    fake_op(&op, &svc);
    ASSERT_INT_EQ(shl_cursor_fill_batch(&op, c, 0, false, &arr, &exhausted, &st), 0);
    ASSERT_INT_EQ(bson_count_keys(&arr), 3);
    bson_reinit(&arr);
    ASSERT_INT_EQ(shl_cursor_fill_batch(&op, c, 0, false, &arr, &exhausted, &st), 0);
    ASSERT_INT_EQ(bson_count_keys(&arr), 2);
    ASSERT(bson_iter_init_find(&it, &arr, "0"));
    ASSERT(bson_iter_recurse(&it, &it) && bson_iter_find(&it, "_id"));
    ASSERT_INT_EQ(bson_iter_int32(&it), 3);
    ASSERT(exhausted);
    shl_cursor_destroy(c);
    bson_destroy(&arr);
}

SHL_TEST(document_no_reply_can_carry_fails_the_batch)
{
    /* A pipeline may build a document of 17 MiB (a $group's $push): it goes out alone in no
     * reply, BSONObjectTooLarge instead; one of 16 MiB still goes out, alone. */
    shl_service_ctx_t svc;
    shl_op_ctx_t op;
    shl_status_t st;
    bool destroyed, exhausted;
    shl_cursor_t *c = make_cursor(1, 17 * 1024 * 1024, &destroyed);
    bson_t arr = BSON_INITIALIZER;

    fake_op(&op, &svc);
    ASSERT_INT_EQ(shl_cursor_fill_batch(&op, c, 0, true, &arr, &exhausted, &st), 10334);
    ASSERT_INT_EQ(bson_count_keys(&arr), 0);
    shl_cursor_destroy(c);
    c = make_cursor(2, 16 * 1024 * 1024 - 64, &destroyed);
    bson_reinit(&arr);
    ASSERT_INT_EQ(shl_cursor_fill_batch(&op, c, 0, true, &arr, &exhausted, &st), 0);
    ASSERT_INT_EQ(bson_count_keys(&arr), 1);
    shl_cursor_destroy(c);
    bson_destroy(&arr);
}

SHL_TEST(batches_of_tiny_documents_count_their_keys)
{
    /* 2,000,000 documents of 14 bytes: with its array keys a 16 MiB batch of them would be
     * about 70% larger than the documents alone. The reply (batch plus envelope) must stay
     * within the internal limit every receiver checks. */
    shl_service_ctx_t svc;
    shl_op_ctx_t op;
    shl_status_t st;
    bool destroyed, exhausted = false;
    shl_cursor_t *c = make_cursor(2000000, 0, &destroyed);
    bson_t arr = BSON_INITIALIZER, reply = BSON_INITIALIZER;
    int64_t total = 0;

    fake_op(&op, &svc);
    while (!exhausted) {
        bson_reinit(&arr);
        bson_reinit(&reply);
        ASSERT_INT_EQ(shl_cursor_fill_batch(&op, c, 0, false, &arr, &exhausted, &st), 0);
        ASSERT(arr.len <= SHL_CURSOR_MAX_BATCH_BYTES);
        total += bson_count_keys(&arr);
        shl_cursor_reply(&reply, "test.c", 1234567890123LL, false, &arr);
        ASSERT(reply.len <= SHL_CURSOR_MAX_BATCH_BYTES + 16 * 1024);
    }
    ASSERT_INT_EQ(total, 2000000);
    shl_cursor_destroy(c);
    bson_destroy(&arr);
    bson_destroy(&reply);
}

SHL_TEST(pin_kill_and_reap)
{
    shl_cursor_manager_t *mgr = shl_cursor_manager_new();
    shl_status_t st;
    bool d1, d2, d3;
    shl_cursor_t *c1 = make_cursor(1, 0, &d1), *c2 = make_cursor(1, 0, &d2),
                 *c3 = make_cursor(1, 0, &d3), *got;
    int64_t id1 = shl_cursor_manager_register(mgr, c1, NULL);
    int64_t id2 = shl_cursor_manager_register(mgr, c2, NULL);
    int64_t id3 = shl_cursor_manager_register(mgr, c3, NULL);

    ASSERT(id1 > 0 && id2 > 0 && id1 != id2);
    ASSERT_INT_EQ(shl_cursor_manager_pin(mgr, id1, "test.c", &got, &st), 0);
    ASSERT(got == c1);
    ASSERT_INT_EQ(shl_cursor_manager_pin(mgr, id1, "test.c", &got, &st), SHL_CODE_CURSOR_IN_USE);
    ASSERT_INT_EQ(shl_cursor_manager_pin(mgr, id2, "test.d", &got, &st), SHL_CODE_UNAUTHORIZED);
    ASSERT_INT_EQ(shl_cursor_manager_pin(mgr, 12345, "test.c", &got, &st),
                  SHL_CODE_CURSOR_NOT_FOUND);
    /* Killing a pinned cursor takes effect when it is returned. */
    ASSERT_INT_EQ(shl_cursor_manager_kill(mgr, id1, "test.c"), SHL_CURSOR_KILLED);
    ASSERT(!d1);
    shl_cursor_manager_unpin(mgr, c1, false);
    ASSERT(d1);
    ASSERT_INT_EQ(shl_cursor_manager_kill(mgr, id1, "test.c"), SHL_CURSOR_NOT_FOUND);
    /* Reaping removes idle cursors only, and not noCursorTimeout ones. */
    c3->no_timeout = true;
    ASSERT_INT_EQ(shl_cursor_manager_reap(mgr, shl_clock_wall_ms() + 1000, 600000), 0);
    ASSERT_INT_EQ(shl_cursor_manager_reap(mgr, shl_clock_wall_ms() + 700000, 600000), 1);
    ASSERT(d2 && !d3);
    ASSERT_INT_EQ(shl_cursor_manager_count(mgr), 1);
    ASSERT_INT_EQ(shl_cursor_manager_kill_ns(mgr, "test.c"), 1);
    ASSERT(d3);
    (void)id3;
    shl_cursor_manager_destroy(mgr);
}

static bool
same_session(void *arg, const shl_lsid_t *lsid)
{
    return shl_lsid_equal(arg, lsid);
}

static void
count_session(void *arg, const shl_lsid_t *lsid)
{
    (void)lsid;
    (*(int *)arg)++;
}

SHL_TEST(kill_by_session)
{
    shl_cursor_manager_t *mgr = shl_cursor_manager_new();
    shl_op_ctx_t a, b;
    bool d1, d2, d3;
    int n = 0;
    shl_cursor_t *c1 = make_cursor(1, 0, &d1), *c2 = make_cursor(1, 0, &d2),
                 *c3 = make_cursor(1, 0, &d3);

    memset(&a, 0, sizeof(a));
    memset(&b, 0, sizeof(b));
    a.has_lsid = b.has_lsid = true;
    shl_lsid_new(&a.lsid_key);
    shl_lsid_new(&b.lsid_key);
    shl_cursor_manager_register(mgr, c1, &a);
    shl_cursor_manager_register(mgr, c2, &b);
    shl_cursor_manager_register(mgr, c3, NULL); /* no session: never killed by one */
    shl_cursor_manager_sessions(mgr, count_session, &n);
    ASSERT_INT_EQ(n, 2);
    ASSERT_INT_EQ(shl_cursor_manager_kill_sessions(mgr, same_session, &a.lsid_key), 1);
    ASSERT(d1 && !d2 && !d3);
    ASSERT_INT_EQ(shl_cursor_manager_count(mgr), 2);
    shl_cursor_manager_destroy(mgr);
}
