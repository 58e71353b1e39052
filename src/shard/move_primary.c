/*
 * move_primary.c -- the donor side of movePrimary (docs/design/sharding-protocol.md
 * "movePrimary"): _shardsvrMovePrimary, run by the database's current primary shard. It
 * blocks the database's versioned writes (a database critical section), clones every
 * unsharded collection (options, indexes, documents) onto the recipient with ordinary
 * commands, has the config server commit the new primary, refreshes, leaves the critical
 * section and drops its own stale copies. A coordinator document in
 * config.movePrimaryCoordinators makes a crash recoverable: before the commit the clones
 * are dropped (abort), after it the stale copies. A config server that is down meanwhile
 * (kill -9, restart) is waited for with the critical section held, and the move completes.
 * A retry of the running move (same database and target) joins it and answers with its
 * result.
 */
#include <string.h>

#include "base/clock.h"
#include "base/failpoint.h"
#include "base/log.h"
#include "base/namespace.h"
#include "bson/bson_iter.h"
#include "net/command_args.h"
#include "net/stmt_batch.h"
#include "shard/ddl_coordinator_base.h"
#include "shard/migration_private.h"
#include "shard/shard_private.h"

#define MP_COLL "movePrimaryCoordinators"
#define MP_TIMEOUT_MS 60000

/* Pause with writes blocked and the coordinator document written, before the clone
 * (MongoDB's name), then -- Shale's names -- with reads blocked too before the config
 * commit, and after the commit before the cleanup. */
SHL_FAILPOINT_DEFINE(hangBeforeCloningData)
SHL_FAILPOINT_DEFINE(hangBeforeMovePrimaryCommit)
SHL_FAILPOINT_DEFINE(hangBeforeMovePrimaryCleanup)

/* The coordinator document: {_id: db, from, to, collections: [names], decision?}. */
typedef struct mp_coord {
    char db[SHL_DB_NAME_MAX + 1];
    char from[SHL_SHARD_ID_MAX];
    char to[SHL_SHARD_ID_MAX];
    char **colls;
    bson_t **options; /* each collection's listCollections 'options' (owned) */
    size_t ncolls;
    int decision; /* 0 none, 1 committed, -1 aborted */
} mp_coord_t;

static void
coord_cleanup(mp_coord_t *c)
{
    for (size_t i = 0; i < c->ncolls; i++) {
        bson_free(c->colls[i]);
        if (c->options != NULL && c->options[i] != NULL) {
            bson_destroy(c->options[i]);
        }
    }
    bson_free(c->colls);
    bson_free(c->options);
    c->colls = NULL;
    c->options = NULL;
    c->ncolls = 0;
}

static void
coord_add(mp_coord_t *c, const char *name, const bson_t *options)
{
    c->colls = bson_realloc(c->colls, (c->ncolls + 1) * sizeof(*c->colls));
    c->options = bson_realloc(c->options, (c->ncolls + 1) * sizeof(*c->options));
    c->colls[c->ncolls] = bson_strdup(name);
    c->options[c->ncolls] = options != NULL ? bson_copy(options) : NULL;
    c->ncolls++;
}

static void
coord_to_bson(const mp_coord_t *c, bson_t *out)
{
    bson_t arr;
    char key[24];

    bson_init(out);
    BSON_APPEND_UTF8(out, "_id", c->db);
    BSON_APPEND_UTF8(out, "from", c->from);
    BSON_APPEND_UTF8(out, "to", c->to);
    BSON_APPEND_ARRAY_BEGIN(out, "collections", &arr);
    for (size_t i = 0; i < c->ncolls; i++) {
        snprintf(key, sizeof(key), "%zu", i);
        BSON_APPEND_UTF8(&arr, key, c->colls[i]);
    }
    bson_append_array_end(out, &arr);
    if (c->decision != 0) {
        BSON_APPEND_UTF8(out, "decision", c->decision > 0 ? "committed" : "aborted");
    }
}

static int
coord_parse(const bson_t *doc, mp_coord_t *c, shl_status_t *st)
{
    int ret = 0;
    bson_iter_t it, arr;

    memset(c, 0, sizeof(*c));
    if (!bson_iter_init(&it, doc)) {
        SHL_FAIL(st, SHL_CODE_BAD_VALUE, "malformed movePrimary coordinator document");
    }
    while (shl_iter_next(&it)) {
        const char *k = shl_iter_key(&it);
        if (strcmp(k, "_id") == 0 && BSON_ITER_HOLDS_UTF8(&it)) {
            snprintf(c->db, sizeof(c->db), "%s", bson_iter_utf8(&it, NULL));
        } else if (strcmp(k, "from") == 0 && BSON_ITER_HOLDS_UTF8(&it)) {
            snprintf(c->from, sizeof(c->from), "%s", bson_iter_utf8(&it, NULL));
        } else if (strcmp(k, "to") == 0 && BSON_ITER_HOLDS_UTF8(&it)) {
            snprintf(c->to, sizeof(c->to), "%s", bson_iter_utf8(&it, NULL));
        } else if (strcmp(k, "decision") == 0 && BSON_ITER_HOLDS_UTF8(&it)) {
            c->decision = strcmp(bson_iter_utf8(&it, NULL), "committed") == 0 ? 1 : -1;
        } else if (strcmp(k, "collections") == 0 && BSON_ITER_HOLDS_ARRAY(&it) &&
                   bson_iter_recurse(&it, &arr)) {
            while (shl_iter_next(&arr)) {
                if (BSON_ITER_HOLDS_UTF8(&arr)) {
                    coord_add(c, bson_iter_utf8(&arr, NULL), NULL);
                }
            }
        }
    }
    if (c->db[0] == '\0' || c->to[0] == '\0') {
        coord_cleanup(c);
        SHL_FAIL(st, SHL_CODE_BAD_VALUE, "malformed movePrimary coordinator document");
    }
done:
    return ret;
}

/* Insert (first write), replace, or delete the coordinator document, journaled. */
static int
coord_write(shard_state_t *s, const mp_coord_t *c, int how, shl_status_t *st)
{
    int ret;
    bson_t cmd = BSON_INITIALIZER, arr, stmt, doc, reply, wc;

    coord_to_bson(c, &doc);
    if (how == 0) {
        BSON_APPEND_UTF8(&cmd, "insert", MP_COLL);
        BSON_APPEND_ARRAY_BEGIN(&cmd, "documents", &arr);
        BSON_APPEND_DOCUMENT(&arr, "0", &doc);
    } else {
        bson_t q;
        BSON_APPEND_UTF8(&cmd, how > 0 ? "update" : "delete", MP_COLL);
        BSON_APPEND_ARRAY_BEGIN(&cmd, how > 0 ? "updates" : "deletes", &arr);
        BSON_APPEND_DOCUMENT_BEGIN(&arr, "0", &stmt);
        BSON_APPEND_DOCUMENT_BEGIN(&stmt, "q", &q);
        BSON_APPEND_UTF8(&q, "_id", c->db);
        bson_append_document_end(&stmt, &q);
        if (how > 0) {
            BSON_APPEND_DOCUMENT(&stmt, "u", &doc);
        } else {
            BSON_APPEND_INT32(&stmt, "limit", 1);
        }
        bson_append_document_end(&arr, &stmt);
    }
    bson_append_array_end(&cmd, &arr);
    BSON_APPEND_DOCUMENT_BEGIN(&cmd, "writeConcern", &wc);
    BSON_APPEND_BOOL(&wc, "j", true);
    bson_append_document_end(&cmd, &wc);
    ret = shard_local_cmd(s, "config", &cmd, &reply, st);
    bson_destroy(&reply);
    bson_destroy(&doc);
    bson_destroy(&cmd);
    return ret;
}

/* A remote command whose reply's first writeError becomes the status. */
static int
remote_write(shard_state_t *s, const char *shard, const char *db, const bson_t *cmd,
             shl_status_t *st)
{
    int ret = 0;
    bson_t reply;

    SHL_ERR(shard_remote_cmd(s, shard, db, cmd, MP_TIMEOUT_MS, &reply, st));
    ret = shl_status_from_write_errors(&reply, st);
    bson_destroy(&reply);
done:
    return ret;
}

/* Whether the config server could not answer at all (down, restarting, not primary yet,
 * a timeout): it may answer the same request later. */
static bool
config_unreachable(int code)
{
    return shl_code_in_category(code, SHL_CAT_NETWORK_ERROR | SHL_CAT_NOT_PRIMARY_ERROR |
                                          SHL_CAT_SHUTDOWN_ERROR | SHL_CAT_RETRIABLE_ERROR);
}

/* A read from the config server once the move holds its critical section: while the
 * config server cannot be reached (a kill -9 and restart) it is asked again every half
 * second rather than throwing the clone away. Interrupted (shutdown) ends the wait. */
static int
config_read(shard_state_t *s, shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    int ret = 0;

    for (;;) {
        shl_status_t again = SHL_STATUS_INIT;
        ret = shard_config_cmd(s, "config", cmd, MP_TIMEOUT_MS, reply, st);
        if (ret == 0 || !config_unreachable(ret)) {
            break;
        }
        if (mig_sleep(op, 500, &again) != 0) {
            *st = again;
            ret = again.code;
            break; /* *reply stays initialised, as the caller expects */
        }
        bson_destroy(reply);
        shl_status_clear(st);
    }
    return ret;
}

/* ---------------------------------------------------------------- what moves */

/* Whether 'name' of 'db' is in config.collections (sharded). */
static bool
is_sharded(const bson_t *docs, size_t n, const char *db, const char *name)
{
    char ns[SHL_NS_MAX + 1];

    snprintf(ns, sizeof(ns), "%s.%s", db, name);
    for (size_t i = 0; i < n; i++) {
        bson_iter_t it;
        if (bson_iter_init_find(&it, &docs[i], "_id") && BSON_ITER_HOLDS_UTF8(&it) &&
            strcmp(bson_iter_utf8(&it, NULL), ns) == 0) {
            return true;
        }
    }
    return false;
}

/* Free what cursor_all collected. */
static void
docs_free(bson_t **docs, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        bson_destroy(docs[i]);
    }
    bson_free(docs);
}

/*
 * Run the cursor command 'cmd' (a listing) on database 'db' of 'shard' (NULL: this shard) and
 * collect every document it returns, following the cursor with getMore: a database may hold
 * more collections than one batch (101 by default). *out holds copies; free them with
 * docs_free. On error *out is empty (the shard reaps a cursor left open).
 */
static int
cursor_all(shard_state_t *s, const char *shard, const char *db, const bson_t *cmd, bson_t ***out,
           size_t *n, shl_status_t *st)
{
    int ret = 0;
    bson_t reply = BSON_INITIALIZER, more = BSON_INITIALIZER, *docs = NULL;
    const bson_t *next = cmd;
    size_t nd, cap = 0;
    char coll[SHL_NS_MAX + 1] = "";
    bson_iter_t it;

    *out = NULL;
    *n = 0;
    for (;;) {
        int64_t id;
        bson_destroy(&reply);
        if (shard == NULL) {
            SHL_ERR(shard_local_cmd(s, db, next, &reply, st));
        } else {
            SHL_ERR(shard_remote_cmd(s, shard, db, next, MP_TIMEOUT_MS, &reply, st));
        }
        nd = mig_cursor_docs(&reply, &docs);
        for (size_t i = 0; i < nd; i++) {
            if (*n == cap) {
                cap = cap == 0 ? 64 : cap * 2;
                *out = bson_realloc(*out, cap * sizeof(**out));
            }
            (*out)[(*n)++] = bson_copy(&docs[i]);
        }
        bson_free(docs);
        docs = NULL;
        if ((id = mig_cursor_id(&reply)) == 0) {
            break;
        }
        if (coll[0] == '\0' && bson_iter_init(&it, &reply) &&
            bson_iter_find_descendant(&it, "cursor.ns", &it) && BSON_ITER_HOLDS_UTF8(&it)) {
            const char *ns = bson_iter_utf8(&it, NULL), *dot = strchr(ns, '.');
            snprintf(coll, sizeof(coll), "%s", dot != NULL ? dot + 1 : ns);
        }
        bson_reinit(&more);
        BSON_APPEND_INT64(&more, "getMore", id);
        BSON_APPEND_UTF8(&more, "collection", coll);
        next = &more;
    }
done:
    bson_free(docs);
    bson_destroy(&reply);
    bson_destroy(&more);
    if (ret != 0) {
        docs_free(*out, *n);
        *out = NULL;
        *n = 0;
    }
    return ret;
}

/*
 * The unsharded collections of 'db' on this shard, with their options, into c: every
 * collection listCollections shows that config.collections does not name (views and
 * system collections other than data ones are left out: Shale has no views yet).
 */
static int
list_unsharded(shard_state_t *s, shl_op_ctx_t *op, const char *db, mp_coord_t *c, shl_status_t *st)
{
    int ret = 0;
    char re[SHL_DB_NAME_MAX + 16];
    bson_t *q = NULL, *lc = NULL, creply = BSON_INITIALIZER;
    bson_t *sharded = NULL, **colls = NULL;
    size_t nsharded = 0, ncolls = 0;

    snprintf(re, sizeof(re), "^\\Q%s.\\E", db);
    q = BCON_NEW("find", BCON_UTF8("collections"), "filter", "{", "_id", "{", "$regex",
                 BCON_UTF8(re), "}", "}", "batchSize", BCON_INT32(100000));
    bson_destroy(&creply);
    SHL_ERR(config_read(s, op, q, &creply, st));
    nsharded = mig_cursor_docs(&creply, &sharded);
    lc = BCON_NEW("listCollections", BCON_INT32(1));
    SHL_ERR(cursor_all(s, NULL, db, lc, &colls, &ncolls, st));
    for (size_t i = 0; i < ncolls; i++) {
        bson_iter_t it;
        const char *name = NULL;
        bson_t options = BSON_INITIALIZER;
        bool is_view = false;
        if (bson_iter_init_find(&it, colls[i], "name") && BSON_ITER_HOLDS_UTF8(&it)) {
            name = bson_iter_utf8(&it, NULL);
        }
        if (bson_iter_init_find(&it, colls[i], "type") && BSON_ITER_HOLDS_UTF8(&it)) {
            is_view = strcmp(bson_iter_utf8(&it, NULL), "collection") != 0;
        }
        if (bson_iter_init_find(&it, colls[i], "options") && BSON_ITER_HOLDS_DOCUMENT(&it)) {
            const uint8_t *data;
            uint32_t len;
            bson_iter_document(&it, &len, &data);
            bson_destroy(&options);
            bson_init_static(&options, data, len);
        }
        if (name != NULL && !is_view && strncmp(name, "system.", 7) != 0 &&
            !is_sharded(sharded, nsharded, db, name)) {
            coord_add(c, name, &options);
        }
        bson_destroy(&options);
    }
done:
    bson_free(sharded);
    docs_free(colls, ncolls);
    if (q != NULL) {
        bson_destroy(q);
    }
    if (lc != NULL) {
        bson_destroy(lc);
    }
    bson_destroy(&creply);
    return ret;
}

/*
 * The recipient must not hold any of the collections already: an empty leftover is
 * dropped, one with documents fails the move (NamespaceExists), as MongoDB refuses to
 * overwrite a collection on the new primary.
 */
static int
check_recipient(shard_state_t *s, const mp_coord_t *c, shl_status_t *st)
{
    int ret = 0;
    bson_t **docs = NULL;
    bson_t *lc = BCON_NEW("listCollections", BCON_INT32(1), "nameOnly", BCON_BOOL(true));
    size_t n = 0;

    SHL_ERR(cursor_all(s, c->to, c->db, lc, &docs, &n, st));
    for (size_t i = 0; i < n; i++) {
        bson_iter_t it;
        const char *name;
        bool listed = false;
        if (!bson_iter_init_find(&it, docs[i], "name") || !BSON_ITER_HOLDS_UTF8(&it)) {
            continue;
        }
        name = bson_iter_utf8(&it, NULL);
        for (size_t j = 0; j < c->ncolls && !listed; j++) {
            listed = strcmp(c->colls[j], name) == 0;
        }
        if (listed) {
            bson_t cr, *cnt = BCON_NEW("count", BCON_UTF8(name));
            int64_t docs_there = 0;
            ret = shard_remote_cmd(s, c->to, c->db, cnt, MP_TIMEOUT_MS, &cr, st);
            if (ret == 0 && bson_iter_init_find(&it, &cr, "n")) {
                docs_there = bson_iter_as_int64(&it);
            }
            bson_destroy(&cr);
            bson_destroy(cnt);
            SHL_ERR(ret);
            if (docs_there > 0) {
                SHL_FAIL(st, SHL_CODE_NAMESPACE_EXISTS,
                         "movePrimary of %s: collection %s.%s already exists with data on the "
                         "recipient shard %s",
                         c->db, c->db, name, c->to);
            }
            {
                bson_t *drop = BCON_NEW("drop", BCON_UTF8(name));
                ret = remote_write(s, c->to, c->db, drop, st);
                bson_destroy(drop);
                SHL_ERR(ret);
            }
        }
    }
done:
    docs_free(docs, n);
    bson_destroy(lc);
    return ret;
}

/* ---------------------------------------------------------------- clone */

/* Insert the statements of 'b' on the recipient, journaled, then empty it. */
static int
flush_inserts(shard_state_t *s, const mp_coord_t *c, const char *coll, shl_stmt_batch_t *b,
              shl_status_t *st)
{
    int ret;
    bson_t cmd = BSON_INITIALIZER, wc;

    BSON_APPEND_UTF8(&cmd, "insert", coll);
    BSON_APPEND_BOOL(&cmd, "ordered", true);
    /* Copies, not new writes: documents stored before a validator existed move too. */
    BSON_APPEND_BOOL(&cmd, "bypassDocumentValidation", true);
    shl_stmt_batch_append_to(b, &cmd, "documents");
    BSON_APPEND_DOCUMENT_BEGIN(&cmd, "writeConcern", &wc);
    BSON_APPEND_BOOL(&wc, "j", true);
    bson_append_document_end(&cmd, &wc);
    ret = remote_write(s, c->to, c->db, &cmd, st);
    bson_destroy(&cmd);
    shl_stmt_batch_clear(b);
    return ret;
}

static int
send_inserts(shard_state_t *s, const mp_coord_t *c, const char *coll, bson_t *docs, size_t n,
             shl_status_t *st)
{
    int ret = 0;
    shl_stmt_batch_t b;

    shl_stmt_batch_init(&b);
    for (size_t i = 0; i < n; i++) {
        if (!shl_stmt_batch_has_room(&b, docs[i].len)) {
            SHL_ERR(flush_inserts(s, c, coll, &b, st));
        }
        shl_stmt_batch_append(&b, &docs[i]);
    }
    if (b.n > 0) {
        SHL_ERR(flush_inserts(s, c, coll, &b, st));
    }
done:
    shl_stmt_batch_cleanup(&b);
    return ret;
}

/* The collection's retryable-write history to the recipient, so a retry of a write made
 * here is answered there once it is the primary (writes are blocked: the history is whole). */
static int
send_session_history(shard_state_t *s, const mp_coord_t *c, const char *coll, shl_status_t *st)
{
    int ret = 0;
    char ns[SHL_NS_MAX + 1];
    mig_session_source_t *src;
    bson_t arr = BSON_INITIALIZER, cmd = BSON_INITIALIZER;

    snprintf(ns, sizeof(ns), "%s.%s", c->db, coll);
    src = mig_session_source_new(ns, NULL, NULL, NULL, false);
    for (;;) {
        bson_reinit(&arr);
        SHL_ERR(mig_session_source_next(s, src, &arr, st));
        if (bson_empty(&arr)) {
            break;
        }
        bson_reinit(&cmd);
        BSON_APPEND_INT32(&cmd, "_shardsvrReceiveSessionHistory", 1);
        BSON_APPEND_ARRAY(&cmd, "oplog", &arr);
        SHL_ERR(remote_write(s, c->to, "admin", &cmd, st));
    }
done:
    mig_session_source_destroy(src);
    bson_destroy(&arr);
    bson_destroy(&cmd);
    return ret;
}

/* Create collection i on the recipient with its options and indexes, then copy its
 * documents (the critical section keeps them from changing meanwhile) and their
 * retryable-write history. */
static int
clone_collection(shard_state_t *s, const mp_coord_t *c, size_t i, int64_t *ndocs, shl_status_t *st)
{
    int ret = 0;
    const char *coll = c->colls[i];
    bson_t create = BSON_INITIALIZER, li = BSON_INITIALIZER, lreply = BSON_INITIALIZER;
    bson_t ci = BSON_INITIALIZER, specs, cmd = BSON_INITIALIZER, reply = BSON_INITIALIZER;
    bson_t *idx = NULL, *docs = NULL;
    size_t nidx = 0, nspecs = 0, n = 0;
    int64_t cursor_id = 0;
    bson_iter_t it;

    BSON_APPEND_UTF8(&create, "create", coll);
    if (c->options[i] != NULL && bson_iter_init(&it, c->options[i])) {
        while (shl_iter_next(&it)) {
            bson_append_iter(&create, NULL, 0, &it);
        }
    }
    SHL_ERR(remote_write(s, c->to, c->db, &create, st));

    BSON_APPEND_UTF8(&li, "listIndexes", coll);
    bson_destroy(&lreply);
    SHL_ERR(shard_local_cmd(s, c->db, &li, &lreply, st));
    nidx = mig_cursor_docs(&lreply, &idx);
    BSON_APPEND_UTF8(&ci, "createIndexes", coll);
    BSON_APPEND_ARRAY_BEGIN(&ci, "indexes", &specs);
    for (size_t k = 0; k < nidx; k++) {
        bson_t spec = BSON_INITIALIZER;
        char key[24];
        if (bson_iter_init_find(&it, &idx[k], "name") && BSON_ITER_HOLDS_UTF8(&it) &&
            strcmp(bson_iter_utf8(&it, NULL), "_id_") == 0) {
            bson_destroy(&spec);
            continue; /* create made it, with the collection's collation */
        }
        if (bson_iter_init(&it, &idx[k])) {
            while (shl_iter_next(&it)) {
                if (strcmp(shl_iter_key(&it), "ns") != 0) {
                    bson_append_iter(&spec, NULL, 0, &it);
                }
            }
        }
        snprintf(key, sizeof(key), "%zu", nspecs++);
        BSON_APPEND_DOCUMENT(&specs, key, &spec);
        bson_destroy(&spec);
    }
    bson_append_array_end(&ci, &specs);
    if (nspecs > 0) {
        SHL_ERR(remote_write(s, c->to, c->db, &ci, st));
    }

    BSON_APPEND_UTF8(&cmd, "find", coll);
    BSON_APPEND_INT32(&cmd, "batchSize", 1000);
    for (;;) {
        bson_destroy(&reply);
        SHL_ERR(shard_local_cmd(s, c->db, &cmd, &reply, st));
        bson_free(docs);
        n = mig_cursor_docs(&reply, &docs);
        cursor_id = mig_cursor_id(&reply);
        SHL_ERR(send_inserts(s, c, coll, docs, n, st));
        *ndocs += (int64_t)n;
        if (cursor_id == 0) {
            break;
        }
        bson_reinit(&cmd);
        BSON_APPEND_INT64(&cmd, "getMore", cursor_id);
        BSON_APPEND_UTF8(&cmd, "collection", coll);
        BSON_APPEND_INT32(&cmd, "batchSize", 1000);
    }
    cursor_id = 0;
    SHL_ERR(send_session_history(s, c, coll, st));
done:
    if (cursor_id != 0) {
        bson_t kc = BSON_INITIALIZER, arr, kr;
        shl_status_t ignored = SHL_STATUS_INIT;
        BSON_APPEND_UTF8(&kc, "killCursors", coll);
        BSON_APPEND_ARRAY_BEGIN(&kc, "cursors", &arr);
        BSON_APPEND_INT64(&arr, "0", cursor_id);
        bson_append_array_end(&kc, &arr);
        shard_local_cmd(s, c->db, &kc, &kr, &ignored);
        bson_destroy(&kr);
        bson_destroy(&kc);
    }
    bson_free(idx);
    bson_free(docs);
    bson_destroy(&create);
    bson_destroy(&li);
    bson_destroy(&lreply);
    bson_destroy(&ci);
    bson_destroy(&cmd);
    bson_destroy(&reply);
    return ret;
}

/* Drop the listed collections on 'shard' (NULL: here). A missing one is fine. */
static int
drop_all(shard_state_t *s, const mp_coord_t *c, const char *shard, shl_status_t *st)
{
    int ret = 0;

    for (size_t i = 0; i < c->ncolls; i++) {
        bson_t *drop = BCON_NEW("drop", BCON_UTF8(c->colls[i]));
        if (shard == NULL) {
            bson_t reply;
            ret = shard_local_cmd(s, c->db, drop, &reply, st);
            bson_destroy(&reply);
        } else {
            ret = remote_write(s, shard, c->db, drop, st);
        }
        bson_destroy(drop);
        if (ret == SHL_CODE_NAMESPACE_NOT_FOUND) {
            shl_status_clear(st);
            ret = 0;
        }
        SHL_ERR(ret);
    }
done:
    return ret;
}

/* ---------------------------------------------------------------- commit, decision */

/* Who is the primary of c->db now, by the config server? *committed when c->to. */
static int
ask_config_decision(shard_state_t *s, const mp_coord_t *c, bool *committed, shl_status_t *st)
{
    int ret = 0;
    bson_t *q = BCON_NEW("find", BCON_UTF8("databases"), "filter", "{", "_id", BCON_UTF8(c->db),
                         "}", "readConcern", "{", "level", BCON_UTF8("majority"), "}");
    bson_t reply = BSON_INITIALIZER, *docs = NULL;
    size_t n;
    bson_iter_t it;

    *committed = false;
    bson_destroy(&reply);
    SHL_ERR(shard_config_cmd(s, "config", q, MP_TIMEOUT_MS, &reply, st));
    n = mig_cursor_docs(&reply, &docs);
    if (n > 0 && bson_iter_init_find(&it, &docs[0], "primary") && BSON_ITER_HOLDS_UTF8(&it)) {
        *committed = strcmp(bson_iter_utf8(&it, NULL), c->to) == 0;
    }
done:
    bson_free(docs);
    bson_destroy(q);
    bson_destroy(&reply);
    return ret;
}

/*
 * Finish a decided move: committed -- refresh, drop this shard's stale copies; aborted --
 * drop the recipient's clones. Then the coordinator document goes. The caller leaves the
 * critical section (a recovered move has none).
 */
static int
coord_finish(shard_state_t *s, mp_coord_t *c, shl_status_t *st)
{
    int ret = 0;

    if (c->decision > 0) {
        SHL_ERR(drop_all(s, c, NULL, st));
    } else {
        SHL_ERR(drop_all(s, c, c->to, st));
    }
    SHL_ERR(coord_write(s, c, -1, st));
done:
    return ret;
}

int
shard_move_primary_recover(shard_state_t *s, shl_op_ctx_t *op, shl_status_t *st)
{
    int ret = 0;
    bson_t cmd = BSON_INITIALIZER, reply = BSON_INITIALIZER, *docs = NULL;
    size_t n = 0;

    (void)op;
    BSON_APPEND_UTF8(&cmd, "find", MP_COLL);
    bson_destroy(&reply);
    SHL_ERR(shard_local_cmd(s, "config", &cmd, &reply, st));
    n = mig_cursor_docs(&reply, &docs);
    for (size_t i = 0; i < n; i++) {
        mp_coord_t c;
        bool committed = false;
        if (coord_parse(&docs[i], &c, st) != 0) {
            shl_status_clear(st);
            continue; /* a malformed document cannot be recovered; leave it */
        }
        if (c.decision == 0) {
            ret = ask_config_decision(s, &c, &committed, st);
            c.decision = committed ? 1 : -1;
        }
        if (ret == 0) {
            SHL_LOG_INFO(SHARDING, 4200311, "Recovering a movePrimary", "db", BCON_UTF8(c.db), "to",
                         BCON_UTF8(c.to), "decision",
                         BCON_UTF8(c.decision > 0 ? "committed" : "aborted"));
            shard_db_refresh(s, c.db, st);
            shl_status_clear(st);
            ret = coord_finish(s, &c, st);
        }
        coord_cleanup(&c);
        SHL_ERR(ret);
    }
done:
    bson_free(docs);
    bson_destroy(&cmd);
    bson_destroy(&reply);
    return ret;
}

/* Recover a coordinator document left for 'db' (a failed cleanup) before a new move. */
static int
recover_leftover(shard_state_t *s, shl_op_ctx_t *op, const char *db, shl_status_t *st)
{
    int ret = 0;
    bson_t *cmd = BCON_NEW("find", BCON_UTF8(MP_COLL), "filter", "{", "_id", BCON_UTF8(db), "}");
    bson_t reply = BSON_INITIALIZER, *docs = NULL;
    size_t n;

    bson_destroy(&reply);
    SHL_ERR(shard_local_cmd(s, "config", cmd, &reply, st));
    n = mig_cursor_docs(&reply, &docs);
    if (n > 0) {
        SHL_ERR(shard_move_primary_recover(s, op, st));
    }
done:
    bson_free(docs);
    bson_destroy(cmd);
    bson_destroy(&reply);
    return ret;
}

/* Clone the unsharded collections of c->db that are not in c yet (recorded first). */
static int
clone_latecomers(shard_state_t *s, shl_op_ctx_t *op, mp_coord_t *c, int64_t *ndocs,
                 shl_status_t *st)
{
    int ret = 0;
    mp_coord_t now, late;

    memset(&now, 0, sizeof(now));
    memset(&late, 0, sizeof(late));
    snprintf(late.db, sizeof(late.db), "%s", c->db);
    snprintf(late.from, sizeof(late.from), "%s", c->from);
    snprintf(late.to, sizeof(late.to), "%s", c->to);
    SHL_ERR(list_unsharded(s, op, c->db, &now, st));
    for (size_t i = 0; i < now.ncolls; i++) {
        bool known = false;
        for (size_t j = 0; j < c->ncolls && !known; j++) {
            known = strcmp(now.colls[i], c->colls[j]) == 0;
        }
        if (!known) {
            coord_add(&late, now.colls[i], now.options[i]);
        }
    }
    if (late.ncolls == 0) {
        goto done;
    }
    SHL_ERR(check_recipient(s, &late, st));
    for (size_t i = 0; i < late.ncolls; i++) {
        coord_add(c, late.colls[i], late.options[i]);
    }
    SHL_ERR(coord_write(s, c, 1, st));
    for (size_t i = c->ncolls - late.ncolls; i < c->ncolls; i++) {
        SHL_ERR(shl_op_check_interrupt(op, st));
        SHL_ERR(clone_collection(s, c, i, ndocs, st));
    }
done:
    coord_cleanup(&now);
    coord_cleanup(&late);
    return ret;
}

static int
send_commit(shard_state_t *s, const mp_coord_t *c, const shl_database_version_t *v,
            shl_status_t *st)
{
    int ret;
    bson_t cmd = BSON_INITIALIZER, wc, reply;

    BSON_APPEND_UTF8(&cmd, "_configsvrCommitMovePrimary", c->db);
    BSON_APPEND_UTF8(&cmd, "from", c->from);
    BSON_APPEND_UTF8(&cmd, "to", c->to);
    shl_database_version_append(&cmd, "expectedDatabaseVersion", v);
    BSON_APPEND_DOCUMENT_BEGIN(&cmd, "writeConcern", &wc);
    BSON_APPEND_UTF8(&wc, "w", "majority");
    bson_append_document_end(&cmd, &wc);
    ret = shard_config_cmd(s, "admin", &cmd, MP_TIMEOUT_MS, &reply, st);
    bson_destroy(&reply);
    bson_destroy(&cmd);
    return ret;
}

/*
 * Commit the move on the config server. While it cannot be reached (a kill -9 and
 * restart of the config server), the same commit is sent again every half second: the
 * critical section holds meanwhile and the commit is idempotent (the primary already
 * 'to': ok), so the move completes once the config server is back rather than being
 * thrown away. When it answers with an error, that answer may follow a lost reply to an
 * earlier attempt: the database entry decides (*committed). Returns 0 when committed;
 * the config server's error with *committed false; Interrupted / InterruptedAtShutdown
 * when the wait is interrupted before any answer (the outcome is then unknown).
 */
static int
commit_on_config(shard_state_t *s, shl_op_ctx_t *op, const mp_coord_t *c,
                 const shl_database_version_t *v, bool *committed, shl_status_t *st)
{
    int ret = 0;
    bool logged = false;

    *committed = false;
    for (;;) {
        shl_status_t again = SHL_STATUS_INIT;
        ret = send_commit(s, c, v, st);
        if (ret == 0) {
            *committed = true;
            goto done;
        }
        if (!config_unreachable(ret)) {
            break;
        }
        if (!logged) {
            SHL_LOG_WARNING(SHARDING, 4200312,
                            "movePrimary: the config server did not answer the commit; retrying",
                            "db", BCON_UTF8(c->db), "error", BCON_UTF8(st->reason));
            logged = true;
        }
        if (mig_sleep(op, 500, &again) != 0) {
            *st = again;
            SHL_ERR(again.code);
        }
        shl_status_clear(st);
    }
    /* An answer, but maybe to a retry of a commit that went through: ask, until the
     * config server answers that too. */
    for (;;) {
        shl_status_t again = SHL_STATUS_INIT;
        if (ask_config_decision(s, c, committed, &again) == 0) {
            break;
        }
        if (mig_sleep(op, 500, &again) != 0) {
            *st = again;
            SHL_ERR(again.code);
        }
    }
    if (*committed) {
        shl_status_clear(st);
        ret = 0;
    }
done:
    return ret;
}

static void
pause_at(shl_failpoint_t *fp, shl_op_ctx_t *op)
{
    if (atomic_load_explicit(&fp->active, memory_order_relaxed) &&
        shl_failpoint_evaluate(fp, NULL, NULL, NULL)) {
        SHL_LOG_INFO(SHARDING, 4200310, "Hanging at a movePrimary fail point", "failPoint",
                     BCON_UTF8(fp->name));
        shl_failpoint_pause_while_set(fp, &op->killed);
    }
}

/* The move itself, with this shard's registry slot held. */
static int
run_move(shard_state_t *s, shl_op_ctx_t *op, const char *db, const char *to, bson_t *reply,
         shl_status_t *st)
{
    int ret = 0;
    shard_identity_t id;
    shl_cached_database_t have;
    mp_coord_t c;
    bool in_crit = false, persisted = false, committed = false;
    int64_t ndocs = 0;
    char host[SHL_CLIENT_HOST_MAX];

    memset(&c, 0, sizeof(c));
    if (!shard_get_identity(s, &id)) {
        SHL_FAIL(st, SHL_CODE_SHARDING_STATE_NOT_INITIALIZED,
                 "Cannot accept sharding commands if sharding state has not been initialized");
    }
    SHL_ERR(recover_leftover(s, op, db, st));
    SHL_ERR(shard_db_refresh(s, db, st));
    SHL_ERR(shl_catalog_cache_get_database(s->cache, db, &have, st));
    if (strcmp(have.primary, id.shard_name) != 0) {
        SHL_FAIL(st, SHL_CODE_ILLEGAL_OPERATION,
                 "movePrimary of %s: this shard (%s) is not its primary shard (%s)", db,
                 id.shard_name, have.primary);
    }
    if (strcmp(to, id.shard_name) == 0) {
        goto done; /* already there */
    }
    SHL_ERR(shl_shard_registry_host_for(s->registry, to, host, sizeof(host), st));
    snprintf(c.db, sizeof(c.db), "%s", db);
    snprintf(c.from, sizeof(c.from), "%s", id.shard_name);
    snprintf(c.to, sizeof(c.to), "%s", to);

    /* Versioned writes (and DDL) on the database wait from here; the ones in flight end. */
    SHL_ERR(shard_db_crit_enter(s, op, db, SHARD_CRIT_WRITES, st));
    in_crit = true;
    SHL_ERR(list_unsharded(s, op, db, &c, st));
    SHL_ERR(check_recipient(s, &c, st));
    SHL_ERR(coord_write(s, &c, 0, st));
    persisted = true;
    SHL_LOG_INFO(SHARDING, 4200303, "movePrimary cloning", "db", BCON_UTF8(db), "to", BCON_UTF8(to),
                 "collections", BCON_INT64((int64_t)c.ncolls));
    pause_at(SHL_FAILPOINT(hangBeforeCloningData), op);
    for (size_t i = 0; i < c.ncolls; i++) {
        SHL_ERR(shl_op_check_interrupt(op, st));
        SHL_ERR(clone_collection(s, &c, i, &ndocs, st));
    }
    /* Reads wait too from here: once the commit is sent the old primary's copies are
     * stale. */
    SHL_ERR(shard_db_crit_enter(s, op, db, SHARD_CRIT_ALL, st));
    /* DDL does not count as in flight (only writes do), so a create that passed its
     * version check just before the critical section may have finished meanwhile: clone
     * what appeared too. */
    SHL_ERR(clone_latecomers(s, op, &c, &ndocs, st));
    pause_at(SHL_FAILPOINT(hangBeforeMovePrimaryCommit), op);
    SHL_ERR(shl_op_check_interrupt(op, st));
    ret = commit_on_config(s, op, &c, &have.version, &committed, st);
    if (ret != 0 && !committed) {
        /* Interrupted (shutdown) before the config server answered, the outcome is
         * unknown: not aborted, the document stays for the start-up recovery. */
        persisted = persisted && st->code != SHL_CODE_INTERRUPTED &&
                    st->code != SHL_CODE_INTERRUPTED_AT_SHUTDOWN;
        SHL_ERR(ret);
    }
    shl_status_clear(st);
    ret = 0;
    committed = true;
    c.decision = 1;
    /* From here the move stands: failures leave the document for recovery. */
    if (coord_write(s, &c, 1, st) != 0) {
        SHL_LOG_WARNING(SHARDING, 4200304, "could not record the movePrimary decision", "db",
                        BCON_UTF8(db), "error", BCON_UTF8(st->reason));
        shl_status_clear(st);
    }
    if (shard_db_refresh(s, db, st) != 0) {
        /* The waiting requests refresh themselves: the entry was forgotten first. */
        shl_status_clear(st);
    }
    shard_db_crit_exit(s, db);
    in_crit = false;
    pause_at(SHL_FAILPOINT(hangBeforeMovePrimaryCleanup), op);
    if (coord_finish(s, &c, st) != 0) {
        SHL_LOG_WARNING(SHARDING, 4200305, "movePrimary cleanup failed; it resumes later", "db",
                        BCON_UTF8(db), "error", BCON_UTF8(st->reason));
        shl_status_clear(st);
    }
    SHL_LOG_INFO(SHARDING, 4200306, "movePrimary committed", "db", BCON_UTF8(db), "from",
                 BCON_UTF8(c.from), "to", BCON_UTF8(to), "documents", BCON_INT64(ndocs));
done:
    if (ret != 0 && !committed && persisted) {
        shl_status_t ast = SHL_STATUS_INIT;
        SHL_LOG_INFO(SHARDING, 4200309, "movePrimary aborted", "db", BCON_UTF8(db), "to",
                     BCON_UTF8(to), "error", BCON_UTF8(st->reason));
        c.decision = -1;
        if (coord_finish(s, &c, &ast) != 0) {
            SHL_LOG_WARNING(SHARDING, 4200307, "movePrimary abort incomplete; it resumes later",
                            "db", BCON_UTF8(db), "error", BCON_UTF8(ast.reason));
        }
    }
    if (in_crit) {
        shard_db_crit_exit(s, db);
    }
    (void)reply;
    coord_cleanup(&c);
    return ret;
}

/*
 * A retry of the move running now (same database and target: its config server request was
 * lost, e.g. the config server restarted) waits for it and takes its result, as MongoDB's
 * movePrimary coordinator is joined. The caller holds mig_mu. Errors: the move's; the
 * request's interruption; ConflictingOperationInProgress if another move ended meanwhile
 * and the result is gone.
 */
static int
join_move(shard_state_t *s, shl_op_ctx_t *op, shl_status_t *st)
{
    int ret = 0;
    uint64_t gen = s->move_primary_gen;
    char db[SHL_DB_NAME_MAX + 1];

    snprintf(db, sizeof(db), "%s", s->move_primary_db);
    SHL_LOG_INFO(SHARDING, 4200308, "movePrimary request joins the running move", "db",
                 BCON_UTF8(db), "to", BCON_UTF8(s->move_primary_to));
    while (s->move_primary_done_gen < gen) {
        if (shl_op_check_interrupt(op, st) != 0) {
            ret = st->code;
            goto done;
        }
        shl_cond_timedwait_ms(&s->mig_cv, &s->mig_mu, 100);
    }
    if (s->move_primary_done_gen != gen) {
        SHL_FAIL(st, SHL_CODE_CONFLICTING_OPERATION_IN_PROGRESS,
                 "the movePrimary of %s this request joined has ended, its result is gone", db);
    }
    if (s->move_primary_code != 0) {
        *st = s->move_primary_st;
        ret = s->move_primary_code;
    }
done:
    return ret;
}

static bool
op_interrupted(void *arg)
{
    shl_status_t st = SHL_STATUS_INIT;

    return shl_op_check_interrupt(arg, &st) != 0;
}

/* config.changelog "movePrimary.start" on the config server, as MongoDB's primary shard logs
 * it (ShardingLogging); best effort. */
static void
log_start(shard_state_t *s, const char *db, const char *from, const char *to)
{
    shl_status_t st = SHL_STATUS_INIT;
    bson_t cmd = BSON_INITIALIZER, docs, doc, details, reply = BSON_INITIALIZER;
    bson_oid_t oid;
    char id[SHL_SHARD_ID_MAX + 64], oidstr[25];
    int64_t now = shl_clock_wall_ms();

    bson_oid_init(&oid, NULL);
    bson_oid_to_string(&oid, oidstr);
    snprintf(id, sizeof(id), "%s-%lld-%s", from, (long long)now, oidstr);
    BSON_APPEND_UTF8(&cmd, "insert", "changelog");
    BSON_APPEND_ARRAY_BEGIN(&cmd, "documents", &docs);
    BSON_APPEND_DOCUMENT_BEGIN(&docs, "0", &doc);
    BSON_APPEND_UTF8(&doc, "_id", id);
    BSON_APPEND_UTF8(&doc, "shard", from);
    BSON_APPEND_DATE_TIME(&doc, "time", now);
    BSON_APPEND_UTF8(&doc, "what", "movePrimary.start");
    BSON_APPEND_UTF8(&doc, "ns", db);
    BSON_APPEND_DOCUMENT_BEGIN(&doc, "details", &details);
    BSON_APPEND_UTF8(&details, "from", from);
    BSON_APPEND_UTF8(&details, "to", to);
    bson_append_document_end(&doc, &details);
    bson_append_document_end(&docs, &doc);
    bson_append_array_end(&cmd, &docs);
    bson_destroy(&reply);
    if (shard_config_cmd(s, "config", &cmd, MP_TIMEOUT_MS, &reply, &st) != 0) {
        SHL_LOG_WARNING(SHARDING, 4170250, "could not write config.changelog", "what",
                        BCON_UTF8("movePrimary.start"), "error", BCON_UTF8(st.reason));
    }
    bson_destroy(&reply);
    bson_destroy(&cmd);
}

/*
 * The move under the database's DDL lock in X (MongoDB 7.0's flow: the router sends
 * _shardsvrMovePrimary to the primary shard, which locks, then asks the config server): the
 * collection DDL coordinators of the database (IX) finish first and new ones wait; once held,
 * the request's databaseVersion is checked again (a database dropped and created again, or
 * moved, while this waited is not moved with the old version). The config server holds no
 * lock meanwhile, so a coordinator committing there cannot deadlock against the move.
 */
static int
locked_move(shard_state_t *s, shl_op_ctx_t *op, const char *db, const char *to, bson_t *reply,
            shl_status_t *st)
{
    shard_identity_t id;
    bson_t dbv_view;
    const bson_t *dbv = shard_ddl_cmd_dbv(op->body, &dbv_view);
    bool locked = false;
    int ret = 0;

    SHL_ERR(shard_ddl_lock_acquire(s->ddl_locks, db, SHARD_DDL_X, "movePrimary", 0, op_interrupted,
                                   op, st));
    locked = true;
    if (dbv != NULL) {
        SHL_ERR(shard_ddl_check_db_version(s, db, dbv, st));
    }
    if (shard_get_identity(s, &id) && strcmp(id.shard_name, to) != 0) {
        log_start(s, db, id.shard_name, to);
    }
    SHL_ERR(run_move(s, op, db, to, reply, st));
done:
    if (locked) {
        shard_ddl_lock_release(s->ddl_locks, db, SHARD_DDL_X);
    }
    return ret;
}

/* _shardsvrMovePrimary: db, to, databaseVersion? (the database's primary shard; from the
 * router, on the database itself or admin). */
static int
cmd_shardsvr_move_primary(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    int ret = 0;
    shard_state_t *s = shard_state(op);
    bson_iter_t it;
    const char *db = NULL, *to = NULL;
    bool registered = false;
    uint64_t gen = 0;

    if (s == NULL) {
        SHL_FAIL(st, SHL_CODE_SHARDING_STATE_NOT_INITIALIZED, "not a shard");
    }
    if (!bson_iter_init(&it, cmd) || !shl_iter_next(&it) || !BSON_ITER_HOLDS_UTF8(&it)) {
        SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH, "_shardsvrMovePrimary must name a database");
    }
    db = bson_iter_utf8(&it, NULL);
    if (!bson_iter_init_find(&it, cmd, "to") || !BSON_ITER_HOLDS_UTF8(&it)) {
        SHL_FAIL(st, SHL_CODE_IDL_FAILED_TO_PARSE,
                 "BSON field '_shardsvrMovePrimary.to' is missing but a required field");
    }
    to = bson_iter_utf8(&it, NULL);
    /* One move per database at a time; migrations recovered at start-up finish first. */
    pthread_mutex_lock(&s->mig_mu);
    while (s->recovery_started) {
        pthread_cond_wait(&s->mig_cv, &s->mig_mu);
    }
    if (s->move_primary_db != NULL && strcmp(s->move_primary_db, db) == 0 &&
        strcmp(s->move_primary_to, to) == 0) {
        ret = join_move(s, op, st);
        pthread_mutex_unlock(&s->mig_mu);
        goto done;
    }
    if (s->move_primary_db != NULL) {
        ret = shl_status_set(st, SHL_CODE_CONFLICTING_OPERATION_IN_PROGRESS,
                             "Another movePrimary of %s is already running with different "
                             "arguments (to %s)",
                             s->move_primary_db, s->move_primary_to);
    } else {
        s->move_primary_db = bson_strdup(db);
        s->move_primary_to = bson_strdup(to);
        gen = ++s->move_primary_gen;
        registered = true;
    }
    pthread_mutex_unlock(&s->mig_mu);
    SHL_ERR(ret);
    SHL_ERR(shard_ddl_check_primary(s, op, db, st));
    SHL_ERR(locked_move(s, op, db, to, reply, st));
done:
    if (registered) {
        pthread_mutex_lock(&s->mig_mu);
        bson_free(s->move_primary_db);
        bson_free(s->move_primary_to);
        s->move_primary_db = NULL;
        s->move_primary_to = NULL;
        s->move_primary_done_gen = gen;
        s->move_primary_code = ret;
        if (ret != 0) {
            s->move_primary_st = *st;
        }
        pthread_cond_broadcast(&s->mig_cv);
        pthread_mutex_unlock(&s->mig_mu);
    }
    return ret;
}

/* _shardsvrReceiveSessionHistory: {oplog: [entries]} of a moved collection's retryable-write
 * history (the recipient of a movePrimary), taken into this shard's session catalog. */
static int
cmd_receive_session_history(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    int ret = 0;
    shard_state_t *s = shard_state(op);
    size_t n = 0;
    static const char *const fields[] = {"oplog", NULL};

    SHL_ERR(shl_cmd_check_fields(cmd, fields, st));
    SHL_ERR(mig_session_apply(s, op, cmd, &n, st));
    BSON_APPEND_INT64(reply, "n", (int64_t)n);
done:
    return ret;
}

static const shl_command_t move_primary_cmds[] = {
    {.name = "_shardsvrMovePrimary",
     .run = cmd_shardsvr_move_primary,
     .flags = SHL_CMD_INTERNAL | SHL_CMD_NEEDS_PRIMARY,
     .help = "internal: move a database's unsharded collections to another shard (its primary)"},
    {.name = "_shardsvrReceiveSessionHistory",
     .run = cmd_receive_session_history,
     .flags = SHL_CMD_ADMIN_ONLY | SHL_CMD_INTERNAL | SHL_CMD_NEEDS_PRIMARY,
     .help = "internal: the retryable-write history of collections moved here"},
};

void
shard_move_primary_register(shl_command_registry_t *reg)
{
    for (size_t i = 0; i < sizeof(move_primary_cmds) / sizeof(move_primary_cmds[0]); i++) {
        shl_command_registry_add(reg, &move_primary_cmds[i]);
    }
}
