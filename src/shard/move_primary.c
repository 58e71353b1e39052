/*
 * move_primary.c -- movePrimary on the database's primary shard (docs/design/coordinators.md
 * "movePrimary"; MongoDB 7.0's MovePrimaryCoordinator): _shardsvrMovePrimary starts or joins
 * a "movePrimary" DDL coordinator (ddl_coordinator_base.h) holding the database's DDL lock
 * in X, with 7.0's phases, each checkpointed in config.system.sharding_ddl_coordinators:
 *
 *   clone                 block the database's versioned writes, list the unsharded
 *                         collections (persisted as collectionsToClone), clone them onto
 *                         the recipient (options, indexes, documents, retryable history);
 *   enterCriticalSection  block reads too; clone the collections created meanwhile;
 *   commit                _configsvrCommitMovePrimary (the database's new primary, its
 *                         version bumped once); forget the cached database entry;
 *   clean                 drop this shard's stale copies;
 *   exitCriticalSection   leave the critical section; refresh.
 *
 * Before the commit the move is undone on any failure, and on a resume after a crash (the
 * critical section lived in memory, so writes may have reached this shard since): the
 * recipient's clones are dropped, the section left, the operation ends cleanly not done. A
 * resume at commit asks the config server which primary it has: committed, the move goes
 * on; else it is undone. From the commit on it only rolls forward.
 */
#include <string.h>

#include "base/clock.h"
#include "base/failpoint.h"
#include "base/log.h"
#include "base/namespace.h"
#include "bson/bson_iter.h"
#include "net/command_args.h"
#include "net/stmt_batch.h"
#include "shard/ddl_coordinators.h"
#include "shard/migration_private.h"
#include "shard/shard_private.h"

#define MP_TIMEOUT_MS 60000
static const shl_remote_options_t mp_opts = {.timeout_ms = MP_TIMEOUT_MS};
#define OP_MOVE_PRIMARY "movePrimary"
/* MongoDB's code for a movePrimary whose clone cannot be continued (7120202). */
#define MP_CODE_CLONE_FAILED 7120202

/* Pause with writes blocked, before the clone (MongoDB's name), then -- Shale's names --
 * with reads blocked too before the config commit, and after the commit before the
 * cleanup of this shard's stale copies. */
SHL_FAILPOINT_DEFINE(hangBeforeCloningData)
SHL_FAILPOINT_DEFINE(hangBeforeMovePrimaryCommit)
SHL_FAILPOINT_DEFINE(hangBeforeMovePrimaryCleanup)

/* What a phase works on, read from the state document {_id: {namespace: db, operationType},
 * toShardId, fromShardId?, preCommitDbVersion?, collectionsToClone?: [names]}. */
typedef struct mp_coord {
    char db[SHL_DB_NAME_MAX + 1];
    char from[SHL_SHARD_ID_MAX];
    char to[SHL_SHARD_ID_MAX];
    char **colls;
    bson_t **options; /* each collection's listCollections 'options' (owned; NULL: none) */
    size_t ncolls;
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

/* A command to 'shard' whose reply is not needed (its writeErrors fail it, remote.h). */
static int
remote_write(shard_state_t *s, const char *shard, const char *db, const bson_t *cmd,
             shl_status_t *st)
{
    bson_t reply;
    int ret = shl_remote_run_shard(&s->remote, shard, db, cmd, &mp_opts, &reply, st);

    bson_destroy(&reply);
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
        ret = shl_remote_run_config(&s->remote, "config", cmd, &mp_opts, reply, st);
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
            SHL_ERR(shl_remote_run_self(&s->remote, db, next, NULL, &reply, st));
        } else {
            SHL_ERR(shl_remote_run_shard(&s->remote, shard, db, next, &mp_opts, &reply, st));
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
            ret = shl_remote_run_shard(&s->remote, c->to, c->db, cnt, &mp_opts, &cr, st);
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
    SHL_ERR(shl_remote_run_self(&s->remote, c->db, &li, NULL, &lreply, st));
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
        SHL_ERR(shl_remote_run_self(&s->remote, c->db, &cmd, NULL, &reply, st));
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
        shl_remote_run_self(&s->remote, c->db, &kc, NULL, &kr, &ignored);
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
            ret = shl_remote_run_self(&s->remote, c->db, drop, NULL, &reply, st);
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
    SHL_ERR(shl_remote_run_config(&s->remote, "config", q, &mp_opts, &reply, st));
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
    ret = shl_remote_run_config(&s->remote, "admin", &cmd, &mp_opts, &reply, st);
    bson_destroy(&reply);
    bson_destroy(&cmd);
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
    if (shl_remote_run_config(&s->remote, "config", &cmd, &mp_opts, &reply, &st) != 0) {
        SHL_LOG_WARNING(SHARDING, 4170250, "could not write config.changelog", "what",
                        BCON_UTF8("movePrimary.start"), "error", BCON_UTF8(st.reason));
    }
    bson_destroy(&reply);
    bson_destroy(&cmd);
}

/* ---------------------------------------------------------------- the state document */

/* The shard the coordinators run on: the kind's databaseVersion check argument. */
static shard_state_t *
mp_state(shl_coord_t *c)
{
    const shard_ddl_kind_t *kind = shl_coord_type_arg(c);

    return kind->db_check_arg;
}

/* The state document's fields into *mp (free with coord_cleanup). */
static void
mp_from_doc(const bson_t *doc, mp_coord_t *mp)
{
    bson_iter_t it, arr;

    memset(mp, 0, sizeof(*mp));
    shard_ddl_doc_namespace(doc, mp->db, sizeof(mp->db));
    if (bson_iter_init_find(&it, doc, "toShardId") && BSON_ITER_HOLDS_UTF8(&it)) {
        snprintf(mp->to, sizeof(mp->to), "%s", bson_iter_utf8(&it, NULL));
    }
    if (bson_iter_init_find(&it, doc, "fromShardId") && BSON_ITER_HOLDS_UTF8(&it)) {
        snprintf(mp->from, sizeof(mp->from), "%s", bson_iter_utf8(&it, NULL));
    }
    if (bson_iter_init_find(&it, doc, "collectionsToClone") && BSON_ITER_HOLDS_ARRAY(&it) &&
        bson_iter_recurse(&it, &arr)) {
        while (shl_iter_next(&arr)) {
            if (BSON_ITER_HOLDS_UTF8(&arr)) {
                coord_add(mp, bson_iter_utf8(&arr, NULL), NULL);
            }
        }
    }
}

/* Set the document's collectionsToClone to mp's collections and persist it: a resume must
 * know what the recipient may hold before any of it is cloned. */
static int
mp_persist_colls(shl_coord_t *c, const mp_coord_t *mp, shl_status_t *st)
{
    bson_t doc = BSON_INITIALIZER, arr;
    char key[24];
    int ret;

    bson_copy_to_excluding_noinit(shl_coord_doc(c), &doc, "collectionsToClone", NULL);
    BSON_APPEND_ARRAY_BEGIN(&doc, "collectionsToClone", &arr);
    for (size_t i = 0; i < mp->ncolls; i++) {
        snprintf(key, sizeof(key), "%zu", i);
        BSON_APPEND_UTF8(&arr, key, mp->colls[i]);
    }
    bson_append_array_end(&doc, &arr);
    shl_coord_doc_set(c, &doc);
    bson_destroy(&doc);
    ret = shl_coord_persist(c, st);
    return ret;
}

/*
 * Undo the move before its commit, with *st (ret its code) the reason: leave the critical
 * section (this shard stays the primary), drop the recipient's clones -- the document's
 * collectionsToClone, which check_recipient found free there -- and end the operation
 * cleanly not done with the reason. The reason is kept in the document ("undo"), so when the
 * drop fails with a retryable error (returned instead) the phase runs again and undoes
 * again. Any other failure of the drop leaves orphaned clones (logged): unsharded
 * collections on a shard that is not the database's primary are never read.
 */
static int
mp_undo(shl_coord_t *c, int ret, shl_status_t *st)
{
    shard_state_t *s = mp_state(c);
    shl_status_t dst = SHL_STATUS_INIT;
    mp_coord_t mp;
    bson_t doc = BSON_INITIALIZER, why;
    bson_iter_t it;

    if (bson_iter_init_find(&it, shl_coord_doc(c), "undo") && BSON_ITER_HOLDS_DOCUMENT(&it)) {
        bson_iter_t f;
        bson_iter_recurse(&it, &f);
        while (shl_iter_next(&f)) {
            if (strcmp(shl_iter_key(&f), "code") == 0) {
                ret = (int)bson_iter_as_int64(&f);
            } else if (strcmp(shl_iter_key(&f), "errmsg") == 0 && BSON_ITER_HOLDS_UTF8(&f)) {
                shl_status_set(st, ret, "%s", bson_iter_utf8(&f, NULL));
            }
        }
        st->code = ret;
    } else {
        bson_copy_to_excluding_noinit(shl_coord_doc(c), &doc, "undo", NULL);
        BSON_APPEND_DOCUMENT_BEGIN(&doc, "undo", &why);
        BSON_APPEND_INT32(&why, "code", ret);
        BSON_APPEND_UTF8(&why, "errmsg", st->reason);
        bson_append_document_end(&doc, &why);
        shl_coord_doc_set(c, &doc);
    }
    mp_from_doc(shl_coord_doc(c), &mp);
    shard_db_crit_exit(s, mp.db);
    if (drop_all(s, &mp, mp.to, &dst) != 0) {
        SHL_LOG_WARNING(SHARDING, 4200307, "movePrimary could not drop the recipient's clones",
                        "db", BCON_UTF8(mp.db), "to", BCON_UTF8(mp.to), "error",
                        BCON_UTF8(dst.reason));
        if (shl_remote_is_retryable(dst.code)) {
            *st = dst;
            ret = dst.code;
            goto done;
        }
    }
    SHL_LOG_INFO(SHARDING, 4200309, "movePrimary aborted", "db", BCON_UTF8(mp.db), "to",
                 BCON_UTF8(mp.to), "error", BCON_UTF8(st->reason));
    shl_coord_abort(c);
done:
    coord_cleanup(&mp);
    bson_destroy(&doc);
    return ret;
}

/* Whether this phase must undo the move instead of running: a retry after an undo that
 * did not finish, or a resume after a crash (the critical section was in memory). */
static bool
mp_must_undo(shl_coord_t *c, int *ret, shl_status_t *st)
{
    bson_iter_t it;
    char db[SHL_DB_NAME_MAX + 1];

    if (bson_iter_init_find(&it, shl_coord_doc(c), "undo")) {
        return true;
    }
    if (!shl_coord_resumed(c)) {
        return false;
    }
    shard_ddl_doc_namespace(shl_coord_doc(c), db, sizeof(db));
    *ret = shl_status_set(st, MP_CODE_CLONE_FAILED,
                          "movePrimary operation on database %s failed cloning data to the "
                          "recipient: its primary shard restarted before the commit",
                          db);
    return true;
}

/* Persist mp's collections as the document's collectionsToClone, hold at 'fp' (NULL: none),
 * then clone mp's collections from index 'first' on. */
static int
persist_and_clone(shl_coord_t *c, shl_op_ctx_t *op, const mp_coord_t *mp, size_t first,
                  shl_failpoint_t *fp, shl_status_t *st)
{
    int64_t ndocs = 0;
    int ret = 0;

    SHL_ERR(mp_persist_colls(c, mp, st));
    if (fp != NULL) {
        pause_at(fp, op);
    }
    for (size_t i = first; i < mp->ncolls; i++) {
        SHL_ERR(shl_op_check_interrupt(op, st));
        SHL_ERR(clone_collection(mp_state(c), mp, i, &ndocs, st));
    }
    SHL_LOG_INFO(SHARDING, 4200313, "movePrimary cloned", "db", BCON_UTF8(mp->db), "to",
                 BCON_UTF8(mp->to), "documents", BCON_INT64(ndocs));
done:
    return ret;
}

/* ---------------------------------------------------------------- the phases */

/*
 * clone: check this shard is the primary (the target itself: done at once), block the
 * database's versioned writes, list the unsharded collections, check the recipient holds
 * none of them with data, persist them, clone them. Nothing done yet (an error before the
 * critical section) and not retryable: the operation ends cleanly not done; after: undone.
 */
static int
phase_clone(shl_coord_t *c, shl_status_t *st)
{
    shard_state_t *s = mp_state(c);
    shl_op_ctx_t op;
    mp_coord_t mp;
    shard_identity_t id;
    shl_cached_database_t have;
    char host[SHL_CLIENT_HOST_MAX];
    bson_t doc = BSON_INITIALIZER;
    bool in_crit = false, undo = false;
    int ret = 0;

    mig_internal_op(s, &op);
    mp_from_doc(shl_coord_doc(c), &mp);
    if (mp_must_undo(c, &ret, st)) {
        undo = true;
        goto done;
    }
    if (!shard_get_identity(s, &id)) {
        SHL_FAIL(st, SHL_CODE_SHARDING_STATE_NOT_INITIALIZED,
                 "Cannot accept sharding commands if sharding state has not been initialized");
    }
    SHL_ERR(shard_db_refresh(s, mp.db, st));
    SHL_ERR(shl_catalog_cache_get_database(s->cache, mp.db, &have, st));
    if (strcmp(have.primary, id.shard_name) != 0) {
        SHL_FAIL(st, SHL_CODE_ILLEGAL_OPERATION,
                 "movePrimary of %s: this shard (%s) is not its primary shard (%s)", mp.db,
                 id.shard_name, have.primary);
    }
    if (strcmp(mp.to, id.shard_name) == 0) {
        shl_coord_finish(c); /* already there */
        goto done;
    }
    SHL_ERR(shl_shard_registry_host_for(s->registry, mp.to, host, sizeof(host), st));
    snprintf(mp.from, sizeof(mp.from), "%s", id.shard_name);
    log_start(s, mp.db, mp.from, mp.to);
    /* Versioned writes (and DDL) on the database wait from here; the ones in flight end. */
    in_crit = true;
    SHL_ERR(shard_db_crit_enter(s, &op, mp.db, SHARD_CRIT_WRITES, st));
    SHL_ERR(list_unsharded(s, &op, mp.db, &mp, st));
    SHL_ERR(check_recipient(s, &mp, st));
    bson_copy_to_excluding_noinit(shl_coord_doc(c), &doc, "fromShardId", "preCommitDbVersion",
                                  NULL);
    BSON_APPEND_UTF8(&doc, "fromShardId", mp.from);
    shl_database_version_append(&doc, "preCommitDbVersion", &have.version);
    shl_coord_doc_set(c, &doc);
    SHL_LOG_INFO(SHARDING, 4200303, "movePrimary cloning", "db", BCON_UTF8(mp.db), "to",
                 BCON_UTF8(mp.to), "collections", BCON_INT64((int64_t)mp.ncolls));
    SHL_ERR(persist_and_clone(c, &op, &mp, 0, SHL_FAILPOINT(hangBeforeCloningData), st));
done:
    if (undo || (ret != 0 && in_crit)) {
        ret = mp_undo(c, ret, st);
    } else if (ret != 0 && !shl_remote_is_retryable(ret)) {
        shl_coord_abort(c);
    }
    coord_cleanup(&mp);
    bson_destroy(&doc);
    return ret;
}

/*
 * enterCriticalSection: reads wait too (once the commit is sent the old primary's copies are
 * stale). DDL does not count as in flight (only writes do), so a create that passed its
 * version check just before the writes were blocked may have finished since: clone what
 * appeared too (recorded first). Any failure undoes the move.
 */
static int
phase_enter_crit(shl_coord_t *c, shl_status_t *st)
{
    shard_state_t *s = mp_state(c);
    shl_op_ctx_t op;
    mp_coord_t mp, now, late;
    bool undo = false;
    int ret = 0;

    mig_internal_op(s, &op);
    mp_from_doc(shl_coord_doc(c), &mp);
    memset(&now, 0, sizeof(now));
    memset(&late, 0, sizeof(late));
    if (mp_must_undo(c, &ret, st)) {
        undo = true;
        goto done;
    }
    SHL_ERR(shard_db_crit_enter(s, &op, mp.db, SHARD_CRIT_ALL, st));
    late = mp;
    late.colls = NULL;
    late.options = NULL;
    late.ncolls = 0;
    SHL_ERR(list_unsharded(s, &op, mp.db, &now, st));
    for (size_t i = 0; i < now.ncolls; i++) {
        bool known = false;
        for (size_t j = 0; j < mp.ncolls && !known; j++) {
            known = strcmp(now.colls[i], mp.colls[j]) == 0;
        }
        if (!known) {
            coord_add(&late, now.colls[i], now.options[i]);
        }
    }
    if (late.ncolls > 0) {
        SHL_ERR(check_recipient(s, &late, st));
        for (size_t i = 0; i < late.ncolls; i++) {
            coord_add(&mp, late.colls[i], late.options[i]);
        }
        SHL_ERR(persist_and_clone(c, &op, &mp, mp.ncolls - late.ncolls, NULL, st));
    }
    pause_at(SHL_FAILPOINT(hangBeforeMovePrimaryCommit), &op);
    SHL_ERR(shl_op_check_interrupt(&op, st));
done:
    if (undo || ret != 0) {
        ret = mp_undo(c, ret, st);
    }
    coord_cleanup(&mp);
    coord_cleanup(&now);
    coord_cleanup(&late);
    return ret;
}

/*
 * commit: _configsvrCommitMovePrimary at the version the clone began with (idempotent: the
 * primary already 'to' answers ok, the version bumped once). The config server unreachable:
 * the phase runs again, the critical section held. A refusal may answer a retry of a commit
 * that went through: the database entry decides; not committed, the move is undone. A
 * resume asks first (writes may have reached this shard since the crash): committed goes
 * on, else undone.
 */
static int
phase_commit(shl_coord_t *c, shl_status_t *st)
{
    shard_state_t *s = mp_state(c);
    mp_coord_t mp;
    shl_database_version_t v;
    bson_iter_t it;
    bool committed = false, must_undo = false;
    int ret = 0;

    mp_from_doc(shl_coord_doc(c), &mp);
    if (bson_iter_init_find(&it, shl_coord_doc(c), "undo")) {
        must_undo = true;
    } else if (shl_coord_resumed(c)) {
        SHL_ERR(ask_config_decision(s, &mp, &committed, st));
        if (!committed) {
            must_undo = mp_must_undo(c, &ret, st);
        }
    } else {
        if (!bson_iter_init_find(&it, shl_coord_doc(c), "preCommitDbVersion")) {
            SHL_FAIL(st, SHL_CODE_BAD_VALUE, "movePrimary of %s: no preCommitDbVersion", mp.db);
        }
        SHL_ERR(shl_database_version_parse(&it, &v, st));
        ret = send_commit(s, &mp, &v, st);
        if (ret != 0 && config_unreachable(ret)) {
            SHL_LOG_WARNING(SHARDING, 4200312,
                            "movePrimary: the config server did not answer the commit; retrying",
                            "db", BCON_UTF8(mp.db), "error", BCON_UTF8(st->reason));
            goto done;
        }
        if (ret != 0) {
            shl_status_t ask = SHL_STATUS_INIT;
            if (ask_config_decision(s, &mp, &committed, &ask) != 0) {
                *st = ask; /* asked again with the commit when the phase runs again */
                ret = ask.code;
                goto done;
            }
            must_undo = !committed;
        }
    }
    if (must_undo) {
        ret = mp_undo(c, ret, st);
        goto done;
    }
    shl_status_clear(st);
    ret = 0;
    /* The waiting requests refresh themselves too: the entry is forgotten first. */
    if (shard_db_refresh(s, mp.db, st) != 0) {
        shl_status_clear(st);
    }
    SHL_LOG_INFO(SHARDING, 4200306, "movePrimary committed", "db", BCON_UTF8(mp.db), "from",
                 BCON_UTF8(mp.from), "to", BCON_UTF8(mp.to));
done:
    coord_cleanup(&mp);
    return ret;
}

/* clean: drop this shard's stale copies (a missing one is fine). */
static int
phase_clean(shl_coord_t *c, shl_status_t *st)
{
    shard_state_t *s = mp_state(c);
    shl_op_ctx_t op;
    mp_coord_t mp;
    int ret;

    mig_internal_op(s, &op);
    mp_from_doc(shl_coord_doc(c), &mp);
    pause_at(SHL_FAILPOINT(hangBeforeMovePrimaryCleanup), &op);
    ret = drop_all(s, &mp, NULL, st);
    coord_cleanup(&mp);
    return ret;
}

/* exitCriticalSection: the waiting requests go on (and find the new primary). */
static int
phase_exit_crit(shl_coord_t *c, shl_status_t *st)
{
    shard_state_t *s = mp_state(c);
    char db[SHL_DB_NAME_MAX + 1];

    shard_ddl_doc_namespace(shl_coord_doc(c), db, sizeof(db));
    if (shard_db_refresh(s, db, st) != 0) {
        shl_status_clear(st);
    }
    shard_db_crit_exit(s, db);
    return 0;
}

static const shl_coord_phase_t mp_phases[] = {
    {"clone", phase_clone, true},
    {"enterCriticalSection", phase_enter_crit, true},
    {"commit", phase_commit, true},
    {"clean", phase_clean, true},
    {"exitCriticalSection", phase_exit_crit, true},
};

/* The same move: the same target. */
static const char *const mp_same[] = {"toShardId", NULL};
static shard_ddl_kind_t mp_kind = {
    .op = OP_MOVE_PRIMARY, .db_mode = SHARD_DDL_X, .same_fields = mp_same};

SHARD_DDL_DEFINE_TYPE(shard_move_primary_type, "MovePrimaryCoordinator", mp_phases, mp_kind);

/* ---------------------------------------------------------------- the commands */

/* _shardsvrMovePrimary: db, to, databaseVersion? (the database's primary shard; from the
 * router, on the database itself or admin): start or join the database's movePrimary
 * coordinator. */
static int
cmd_shardsvr_move_primary(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    int ret = 0;
    shard_state_t *s = shard_state(op);
    bson_iter_t it;
    bson_t fields = BSON_INITIALIZER, dbv;
    const char *db = NULL, *to = NULL;

    (void)reply;
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
    SHL_LOG_INFO(SHARDING, 4200308, "movePrimary request", "db", BCON_UTF8(db), "to",
                 BCON_UTF8(to));
    /* Not shard_ddl_check_primary: its databaseVersion check waits in the database's critical
     * section, which the running move this request may join holds. The version is checked
     * once a new coordinator holds the database's lock (shard_ddl_check_db_version). */
    if (s->coords == NULL) {
        SHL_FAIL(st, SHL_CODE_SHARDING_STATE_NOT_INITIALIZED,
                 "Cannot accept sharding commands if sharding state has not been initialized");
    }
    if (atomic_load(&s->ddl_blocked)) {
        SHL_FAIL(st, SHL_CODE_USER_WRITES_BLOCKED,
                 "User writes blocked: new sharded DDL is refused while user write blocking is "
                 "being enabled");
    }
    BSON_APPEND_UTF8(&fields, "toShardId", to);
    SHL_ERR(shard_ddl_start(s->coords, &shard_move_primary_type, db, &fields,
                            shard_ddl_cmd_dbv(cmd, &dbv), NULL, st));
done:
    bson_destroy(&fields);
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
