/*
 * session_test.c -- unit tests of the session library: the lsid map, kill patterns, user
 * digests, the config.system.sessions commands, $listSessions specs, and the logical session
 * cache's refresh over a fake collection (the storage seam).
 */
#include <string.h>

#include "base/options.h"
#include "base/unit_test.h"
#include "bson/bson_iter.h"
#include "bson/bson_util.h"
#include "net/service_context.h"
#include "session/kill_sessions.h"
#include "session/logical_session_cache.h"
#include "session/session_commands.h"
#include "session/session_private.h"
#include "session/sessions_collection.h"

static shl_lsid_t
lsid_n(uint32_t n)
{
    shl_lsid_t l;

    shl_lsid_new(&l);
    memset(l.id, 0, sizeof(l.id));
    memcpy(l.id, &n, sizeof(n));
    return l;
}

SHL_TEST(lsid_map_put_get_remove)
{
    lsid_map_t m;
    bool added;

    lsid_map_init(&m);
    for (uint32_t i = 0; i < 5000; i++) {
        shl_lsid_t l = lsid_n(i);
        lsid_entry_t *e = lsid_map_put(&m, &l, &added);
        ASSERT(added);
        e->last_use_ms = i;
    }
    ASSERT_INT_EQ(m.n, 5000);
    /* Remove every third; the rest must still be found with their values. */
    for (uint32_t i = 0; i < 5000; i += 3) {
        shl_lsid_t l = lsid_n(i);
        ASSERT(lsid_map_remove(&m, &l));
        ASSERT(!lsid_map_remove(&m, &l));
    }
    for (uint32_t i = 0; i < 5000; i++) {
        shl_lsid_t l = lsid_n(i);
        lsid_entry_t *e = lsid_map_get(&m, &l);
        if (i % 3 == 0) {
            ASSERT(e == NULL);
        } else {
            ASSERT(e != NULL);
            ASSERT_INT_EQ(e->last_use_ms, i);
        }
    }
    ASSERT_INT_EQ(m.n, 5000 - 1667);
    lsid_map_cleanup(&m);
}

SHL_TEST(child_sessions_parse_append_and_match_their_parent)
{
    shl_lsid_t parent = lsid_n(9), child, retryable, back, p2;
    shl_status_t st = SHL_STATUS_INIT;
    shl_kill_matcher_t m;
    bson_t doc = BSON_INITIALIZER, view, bad = BSON_INITIALIZER;
    bson_iter_t it;

    shl_lsid_new_child(&parent, false, 0, &child);
    shl_lsid_new_child(&parent, true, 7, &retryable);
    ASSERT(child.child && !child.has_parent_txn_number);
    ASSERT(retryable.has_parent_txn_number && retryable.parent_txn_number == 7);
    ASSERT(!shl_lsid_equal(&parent, &child));
    ASSERT(!shl_lsid_equal(&child, &retryable));
    ASSERT(shl_lsid_hash(&child) == shl_lsid_hash(&parent));
    shl_lsid_parent(&retryable, &p2);
    ASSERT(shl_lsid_equal(&p2, &parent));
    /* {id, uid, txnNumber, txnUUID}, parsed back to the same child. */
    shl_lsid_append(&doc, "lsid", &retryable);
    ASSERT(shl_bson_get_subdoc(&doc, "lsid", &view));
    ASSERT_INT_EQ(bson_count_keys(&view), 4);
    ASSERT(bson_iter_init_find(&it, &view, "txnNumber") && bson_iter_int64(&it) == 7);
    ASSERT_INT_EQ(shl_lsid_parse(&view, &back, &st), 0);
    ASSERT(shl_lsid_equal(&back, &retryable));
    /* txnNumber without txnUUID is refused. */
    bson_append_binary(&bad, "id", 2, BSON_SUBTYPE_UUID, parent.id, 16);
    BSON_APPEND_INT64(&bad, "txnNumber", 1);
    ASSERT_INT_EQ(shl_lsid_parse(&bad, &back, &st), SHL_CODE_INVALID_OPTIONS);
    /* Killing the parent kills its children. */
    shl_kill_matcher_init(&m);
    shl_kill_matcher_add_lsid(&m, &parent);
    ASSERT(shl_kill_matcher_match(&m, &child));
    ASSERT(shl_kill_matcher_match(&m, &retryable));
    shl_kill_matcher_cleanup(&m);
    bson_destroy(&doc);
    bson_destroy(&bad);
}

SHL_TEST(user_digest_is_sha256_of_user_at_db)
{
    uint8_t d[SHL_LSID_UID_LEN];
    shl_lsid_t l;

    /* No user: the digest every unauthenticated session carries (SHA-256 of ""). */
    shl_user_digest("", "", d);
    shl_lsid_new(&l);
    ASSERT(memcmp(d, l.uid, sizeof(d)) == 0);
    /* SHA-256("a@b") = 7508d8b5... */
    shl_user_digest("a", "b", d);
    ASSERT_INT_EQ(d[0], 0x75);
    ASSERT_INT_EQ(d[1], 0x08);
}

SHL_TEST(kill_matcher_patterns)
{
    shl_kill_matcher_t m;
    shl_kill_pattern_t p;
    shl_lsid_t a = lsid_n(1), b = lsid_n(2), c = lsid_n(3);
    bson_t arr = BSON_INITIALIZER;

    shl_kill_matcher_init(&m);
    ASSERT(!shl_kill_matcher_match(&m, &a));
    shl_kill_matcher_add_lsid(&m, &a);
    ASSERT(shl_kill_matcher_match(&m, &a));
    ASSERT(!shl_kill_matcher_match(&m, &b));
    memset(&p, 0, sizeof(p));
    p.kind = SHL_KILL_UID;
    memset(p.uid, 7, sizeof(p.uid));
    shl_kill_matcher_add(&m, &p);
    memset(c.uid, 7, sizeof(c.uid));
    ASSERT(shl_kill_matcher_match(&m, &c));
    ASSERT(!shl_kill_matcher_match(&m, &b));
    shl_kill_matcher_append(&m, &arr);
    ASSERT_INT_EQ(bson_count_keys(&arr), 2);
    p.kind = SHL_KILL_ALL;
    shl_kill_matcher_add(&m, &p);
    ASSERT(shl_kill_matcher_match(&m, &b));
    bson_destroy(&arr);
    shl_kill_matcher_cleanup(&m);
}

SHL_TEST(sessions_commands_shapes)
{
    shl_lsid_t ids[2] = {lsid_n(1), lsid_n(2)};
    bson_t cmd = BSON_INITIALIZER, reply;
    bson_iter_t it;
    bool removed[2] = {true, true};
    shl_status_t st = SHL_STATUS_INIT;

    shl_sessions_refresh_cmd(ids, 2, &cmd);
    ASSERT(bson_iter_init_find(&it, &cmd, "update"));
    ASSERT(bson_iter_init(&it, &cmd) && bson_iter_find_descendant(&it, "updates.1.upsert", &it));
    ASSERT(bson_iter_init(&it, &cmd) &&
           bson_iter_find_descendant(&it, "updates.0.u.0.$set.lastUse", &it));
    ASSERT_STR_EQ(bson_iter_utf8(&it, NULL), "$$NOW");
    bson_reinit(&cmd);
    shl_sessions_find_cmd(ids, 2, &cmd);
    ASSERT(bson_iter_init(&it, &cmd) && bson_iter_find_descendant(&it, "filter._id.$in.1", &it));
    bson_destroy(&cmd);

    /* A find reply holding the second session: only the first is gone. */
    bson_init(&reply);
    {
        bson_t cur, batch, doc;
        BSON_APPEND_DOCUMENT_BEGIN(&reply, "cursor", &cur);
        BSON_APPEND_ARRAY_BEGIN(&cur, "firstBatch", &batch);
        BSON_APPEND_DOCUMENT_BEGIN(&batch, "0", &doc);
        shl_lsid_append(&doc, "_id", &ids[1]);
        bson_append_document_end(&batch, &doc);
        bson_append_array_end(&cur, &batch);
        bson_append_document_end(&reply, &cur);
        BSON_APPEND_DOUBLE(&reply, "ok", 1.0);
    }
    ASSERT_INT_EQ(shl_sessions_mark_found(&reply, ids, 2, removed, &st), 0);
    ASSERT(removed[0]);
    ASSERT(!removed[1]);
    bson_destroy(&reply);
}

static int
parse_stage_json(const char *json, shl_list_sessions_spec_t *spec, shl_status_t *st)
{
    bson_error_t err;
    bson_t *doc = bson_new_from_json((const uint8_t *)json, -1, &err);
    bson_iter_t it;
    int ret;

    bson_iter_init(&it, doc);
    shl_iter_next(&it);
    ret = shl_list_sessions_spec_parse(&it, "$listSessions", spec, st);
    bson_destroy(doc);
    return ret;
}

SHL_TEST(list_sessions_spec)
{
    shl_list_sessions_spec_t spec;
    shl_status_t st = SHL_STATUS_INIT;

    ASSERT_INT_EQ(parse_stage_json("{\"s\": {}}", &spec, &st), 0);
    ASSERT(!spec.all);
    ASSERT_INT_EQ(spec.nuids, 1); /* the logged-in user's own */
    shl_list_sessions_spec_cleanup(&spec);
    ASSERT_INT_EQ(parse_stage_json("{\"s\": {\"allUsers\": true}}", &spec, &st), 0);
    ASSERT(spec.all);
    shl_list_sessions_spec_cleanup(&spec);
    ASSERT_INT_EQ(parse_stage_json("{\"s\": 1}", &spec, &st), SHL_CODE_TYPE_MISMATCH);
    shl_list_sessions_spec_cleanup(&spec);
    ASSERT_INT_EQ(parse_stage_json("{\"s\": {\"x\": 1}}", &spec, &st), SHL_CODE_IDL_UNKNOWN_FIELD);
    ASSERT_STR_EQ(st.reason, "BSON field '$listSessions.x' is an unknown field.");
    shl_list_sessions_spec_cleanup(&spec);
    ASSERT_INT_EQ(parse_stage_json("{\"s\": {\"allUsers\": true, \"users\": [{\"user\": \"a\", "
                                   "\"db\": \"b\"}]}}",
                                   &spec, &st),
                  SHL_CODE_UNSUPPORTED_FORMAT);
    shl_list_sessions_spec_cleanup(&spec);
    ASSERT_INT_EQ(parse_stage_json("{\"s\": {\"users\": [{\"user\": \"a\"}]}}", &spec, &st),
                  SHL_CODE_IDL_FAILED_TO_PARSE);
    ASSERT_STR_EQ(st.reason, "BSON field '$listSessions.users.db' is missing but a required field");
    shl_list_sessions_spec_cleanup(&spec);
}

/* ---------------------------------------------------------------- the cache */

/* A fake config.system.sessions: a map, and a switch that fails refresh batches. */
typedef struct fake_coll {
    lsid_map_t docs;
    bool fail_refresh;
    int refresh_calls;
} fake_coll_t;

static int
fake_setup(void *arg, shl_status_t *st)
{
    (void)arg;
    (void)st;
    return 0;
}

static int
fake_refresh(void *arg, const shl_lsid_t *ids, size_t n, shl_status_t *st)
{
    fake_coll_t *f = arg;

    f->refresh_calls++;
    if (f->fail_refresh) {
        return shl_status_set(st, SHL_CODE_HOST_UNREACHABLE, "fake failure");
    }
    for (size_t i = 0; i < n; i++) {
        bool added;
        lsid_map_put(&f->docs, &ids[i], &added);
    }
    return 0;
}

static int
fake_remove(void *arg, const shl_lsid_t *ids, size_t n, shl_status_t *st)
{
    fake_coll_t *f = arg;

    (void)st;
    for (size_t i = 0; i < n; i++) {
        lsid_map_remove(&f->docs, &ids[i]);
    }
    return 0;
}

static int
fake_find_removed(void *arg, const shl_lsid_t *ids, size_t n, bool *removed, shl_status_t *st)
{
    fake_coll_t *f = arg;

    (void)st;
    for (size_t i = 0; i < n; i++) {
        removed[i] = lsid_map_get(&f->docs, &ids[i]) == NULL;
    }
    return 0;
}

/* The role: one open cursor per session in 'cursors'; kill removes them. */
typedef struct fake_role {
    lsid_map_t cursors;
    int killed;
} fake_role_t;

static void
fake_cursor_sessions(void *arg, void (*fn)(void *, const shl_lsid_t *), void *fn_arg)
{
    fake_role_t *r = arg;

    for (size_t i = 0; i < r->cursors.cap; i++) {
        if (r->cursors.slots[i].used) {
            fn(fn_arg, &r->cursors.slots[i].lsid);
        }
    }
}

static int
fake_kill_cursors(void *arg, const shl_kill_matcher_t *m)
{
    fake_role_t *r = arg;
    int n = 0;

    for (size_t i = 0; i < r->cursors.cap; i++) {
        if (r->cursors.slots[i].used &&
            shl_kill_matcher_match((void *)(uintptr_t)m, &r->cursors.slots[i].lsid)) {
            shl_lsid_t l = r->cursors.slots[i].lsid;
            lsid_map_remove(&r->cursors, &l);
            n++;
            i = (size_t)-1; /* the table shifted: start over */
        }
    }
    r->killed += n;
    return n;
}

SHL_TEST(cache_refresh_end_expire)
{
    shl_service_ctx_t svc;
    fake_coll_t f;
    fake_role_t role;
    shl_lsc_role_t hooks = {0};
    shl_sessions_coll_t coll = {0};
    shl_lsc_t *lsc;
    shl_status_t st = SHL_STATUS_INIT;
    shl_lsid_t a = lsid_n(1), b = lsid_n(2), c = lsid_n(3);
    bool added;

    shl_options_init();
    shl_service_ctx_init(&svc, SHL_ROLE_STANDALONE);
    memset(&f, 0, sizeof(f));
    memset(&role, 0, sizeof(role));
    hooks.cursor_sessions = fake_cursor_sessions;
    hooks.kill_cursors = fake_kill_cursors;
    hooks.arg = &role;
    coll.setup = fake_setup;
    coll.check = fake_setup;
    coll.refresh = fake_refresh;
    coll.remove = fake_remove;
    coll.find_removed = fake_find_removed;
    coll.arg = &f;
    lsc = shl_lsc_new(&svc, &hooks);
    ASSERT(svc.lsc == lsc);
    shl_lsc_set_collection(lsc, &coll);

    ASSERT_INT_EQ(shl_lsc_vivify(lsc, &a, &st), 0);
    ASSERT_INT_EQ(shl_lsc_vivify(lsc, &b, &st), 0);
    ASSERT_INT_EQ(shl_lsc_vivify(lsc, &b, &st), 0);
    ASSERT_INT_EQ(shl_lsc_size(lsc), 2);

    /* A failed refresh keeps the sessions for the next one. */
    f.fail_refresh = true;
    ASSERT_INT_EQ(shl_lsc_refresh_now(lsc, &st), SHL_CODE_HOST_UNREACHABLE);
    ASSERT_INT_EQ(shl_lsc_size(lsc), 2);
    f.fail_refresh = false;
    ASSERT_INT_EQ(shl_lsc_refresh_now(lsc, &st), 0);
    ASSERT(lsid_map_get(&f.docs, &a) != NULL);
    ASSERT(lsid_map_get(&f.docs, &b) != NULL);
    ASSERT_INT_EQ(shl_lsc_size(lsc), 0); /* the cache holds what was used since */

    /* Ended: removed from the collection, its cursors killed. */
    lsid_map_put(&role.cursors, &a, &added);
    lsid_map_put(&role.cursors, &b, &added);
    lsid_map_put(&role.cursors, &c, &added);
    shl_lsc_end(lsc, &a, 1);
    ASSERT_INT_EQ(shl_lsc_refresh_now(lsc, &st), 0);
    ASSERT(lsid_map_get(&f.docs, &a) == NULL);
    ASSERT(lsid_map_get(&role.cursors, &a) == NULL);
    /* c was never in the collection: expired, its cursor killed; b lives on. */
    ASSERT(lsid_map_get(&role.cursors, &c) == NULL);
    ASSERT(lsid_map_get(&role.cursors, &b) != NULL);
    ASSERT_INT_EQ(role.killed, 2);

    /* maxSessions bounds the cache. */
    {
        shl_status_t set = SHL_STATUS_INIT;
        ASSERT_INT_EQ(shl_opt_set_string(SHL_OPT_maxSessions, "1", &set), 0);
    }
    ASSERT_INT_EQ(shl_lsc_vivify(lsc, &a, &st), 0);
    ASSERT_INT_EQ(shl_lsc_vivify(lsc, &a, &st), 0);
    ASSERT_INT_EQ(shl_lsc_vivify(lsc, &b, &st), SHL_CODE_TOO_MANY_LOGICAL_SESSIONS);

    shl_lsc_destroy(lsc);
    ASSERT(svc.lsc == NULL);
    lsid_map_cleanup(&f.docs);
    lsid_map_cleanup(&role.cursors);
    shl_service_ctx_cleanup(&svc);
}
