/*
 * ddl_coordinator_base.c -- the DDL coordinators' common base (ddl_coordinator_base.h;
 * MongoDB 7.0's ShardingDDLCoordinator): their document's key, locks and databaseVersion
 * re-check, join rule, remote calls and the steps several types' phases share. Only
 * remote.h talks to other processes, so the types' unit tests run over the fake remote.
 */
#include "shard/ddl_coordinator_base.h"

#include <string.h>

#include "base/log.h"
#include "base/namespace.h"

const shl_remote_options_t shard_ddl_opts = {.w = "majority",
                                             .timeout_ms = 60000,
                                             .retry = SHL_REMOTE_RETRY_IDEMPOTENT,
                                             .max_attempts = 5,
                                             .backoff_ms = 100};
const shl_remote_options_t shard_ddl_read_opts = {.timeout_ms = 60000,
                                                  .retry = SHL_REMOTE_RETRY_IDEMPOTENT,
                                                  .max_attempts = 5,
                                                  .backoff_ms = 100};

/* ------------------------------------------------------------ document and remote calls */

/* The operation's namespace (_id.namespace) into 'out'. */
void
shard_ddl_doc_namespace(const bson_t *doc, char *out, size_t n)
{
    bson_iter_t it;

    out[0] = '\0';
    if (bson_iter_init(&it, doc) && bson_iter_find_descendant(&it, "_id.namespace", &it) &&
        BSON_ITER_HOLDS_UTF8(&it)) {
        snprintf(out, n, "%s", bson_iter_utf8(&it, NULL));
    }
}

/* The documents of a find reply's cursor.firstBatch, copied (NULL-terminated). */
static bson_t **
batch_of(const bson_t *reply, size_t *n)
{
    bson_iter_t it, batch;
    bson_t **docs = bson_malloc0(sizeof(bson_t *));
    size_t k = 0;

    if (bson_iter_init(&it, reply) && bson_iter_find_descendant(&it, "cursor.firstBatch", &batch) &&
        BSON_ITER_HOLDS_ARRAY(&batch) && bson_iter_recurse(&batch, &it)) {
        while (bson_iter_next(&it)) {
            const uint8_t *data;
            uint32_t len;

            if (BSON_ITER_HOLDS_DOCUMENT(&it)) {
                bson_iter_document(&it, &len, &data);
                docs = bson_realloc(docs, sizeof(bson_t *) * (k + 2));
                docs[k++] = bson_new_from_data(data, len);
                docs[k] = NULL;
            }
        }
    }
    *n = k;
    return docs;
}

void
shard_ddl_docs_free(bson_t **docs)
{
    for (size_t k = 0; docs != NULL && docs[k] != NULL; k++) {
        bson_destroy(docs[k]);
    }
    bson_free(docs);
}

/* find 'filter' in config.<coll> on the config server. */
int
shard_ddl_config_find(shl_coord_t *c, const char *coll, const bson_t *filter, bson_t ***docs,
                      size_t *n, shl_status_t *st)
{
    shl_remote_target_t cfg = shl_remote_target_config();
    shl_remote_options_t opts = shard_ddl_opts;
    bson_t cmd = BSON_INITIALIZER, rc, reply;
    int ret;

    opts.w = NULL;
    BSON_APPEND_UTF8(&cmd, "find", coll);
    BSON_APPEND_DOCUMENT(&cmd, "filter", filter);
    BSON_APPEND_INT32(&cmd, "batchSize", 100000);
    BSON_APPEND_DOCUMENT_BEGIN(&cmd, "readConcern", &rc);
    BSON_APPEND_UTF8(&rc, "level", "majority");
    bson_append_document_end(&cmd, &rc);
    ret = shl_remote_run(shl_coord_remote(c), &cfg, "config", &cmd, &opts, &reply, st);
    *docs = ret == 0 ? batch_of(&reply, n) : NULL;
    if (ret != 0) {
        *n = 0;
    }
    bson_destroy(&reply);
    bson_destroy(&cmd);
    return ret;
}

/* Add 'name' to the NULL-terminated list *ids (of *n) unless it is there. */
static void
add_id(char ***ids, size_t *n, const char *name)
{
    for (size_t k = 0; k < *n; k++) {
        if (strcmp((*ids)[k], name) == 0) {
            return;
        }
    }
    *ids = bson_realloc(*ids, sizeof(char *) * (*n + 2));
    (*ids)[(*n)++] = bson_strdup(name);
    (*ids)[*n] = NULL;
}

/*
 * The shards that may hold data of 'db' / the collections 'colls' (config.collections
 * entries): the database's primary, and every shard owning a chunk of one of them. A shard
 * with no data is no participant (it may be down without holding the drop up).
 */
int
shard_ddl_find_participants(shl_coord_t *c, const char *db, bson_t **colls, size_t ncolls,
                            char ***ids, size_t *n, shl_status_t *st)
{
    bson_t filter = BSON_INITIALIZER;
    bson_t **docs = NULL;
    size_t nd = 0;
    bson_iter_t it;
    int ret = 0;

    *ids = bson_malloc0(sizeof(char *));
    *n = 0;
    BSON_APPEND_UTF8(&filter, "_id", db);
    SHL_ERR(shard_ddl_config_find(c, "databases", &filter, &docs, &nd, st));
    if (nd > 0 && bson_iter_init_find(&it, docs[0], "primary") && BSON_ITER_HOLDS_UTF8(&it)) {
        add_id(ids, n, bson_iter_utf8(&it, NULL));
    }
    for (size_t k = 0; k < ncolls; k++) {
        if (!bson_iter_init_find(&it, colls[k], "uuid")) {
            continue;
        }
        shard_ddl_docs_free(docs);
        docs = NULL;
        bson_reinit(&filter);
        bson_append_iter(&filter, "uuid", -1, &it);
        SHL_ERR(shard_ddl_config_find(c, "chunks", &filter, &docs, &nd, st));
        for (size_t j = 0; j < nd; j++) {
            if (bson_iter_init_find(&it, docs[j], "shard") && BSON_ITER_HOLDS_UTF8(&it)) {
                add_id(ids, n, bson_iter_utf8(&it, NULL));
            }
        }
    }
done:
    shard_ddl_docs_free(docs);
    bson_destroy(&filter);
    return ret;
}

/* The document with "participants" set to 'ids'. */
void
shard_ddl_set_participants(shl_coord_t *c, char **ids, size_t n)
{
    bson_t doc = BSON_INITIALIZER, arr;

    bson_copy_to_excluding_noinit(shl_coord_doc(c), &doc, "participants", NULL);
    BSON_APPEND_ARRAY_BEGIN(&doc, "participants", &arr);
    for (size_t k = 0; k < n; k++) {
        char key[24];
        snprintf(key, sizeof key, "%zu", k);
        BSON_APPEND_UTF8(&arr, key, ids[k]);
    }
    bson_append_array_end(&doc, &arr);
    shl_coord_doc_set(c, &doc);
    bson_destroy(&doc);
}

/* The document's participants (NULL-terminated, bson_strfreev); false if it has none yet. */
bool
shard_ddl_participants_of(const bson_t *doc, char ***ids, size_t *n)
{
    bson_iter_t it, arr;
    bool has = bson_iter_init_find(&it, doc, "participants") && BSON_ITER_HOLDS_ARRAY(&it) &&
               bson_iter_recurse(&it, &arr);

    *ids = bson_malloc0(sizeof(char *));
    *n = 0;
    while (has && bson_iter_next(&arr)) {
        if (BSON_ITER_HOLDS_UTF8(&arr)) {
            add_id(ids, n, bson_iter_utf8(&arr, NULL));
        }
    }
    return has;
}

/* Run 'cmd' on database 'db' of every participant at once; the first error, if any. */
int
shard_ddl_to_participants(shl_coord_t *c, const char *db, const bson_t *cmd, shl_status_t *st)
{
    char **ids = NULL;
    size_t n = 0;
    shl_remote_request_t *reqs = NULL;
    shl_remote_result_t *res = NULL;
    int ret = 0;

    shard_ddl_participants_of(shl_coord_doc(c), &ids, &n);
    if (n > 0) {
        reqs = bson_malloc0(sizeof *reqs * n);
        res = bson_malloc0(sizeof *res * n);
        for (size_t k = 0; k < n; k++) {
            reqs[k].target = shl_remote_target_shard(ids[k]);
            reqs[k].db = db;
            reqs[k].cmd = cmd;
        }
        shl_remote_run_many(shl_coord_remote(c), reqs, n, &shard_ddl_opts, res);
        for (size_t k = 0; k < n && ret == 0; k++) {
            if (res[k].code != 0) {
                *st = res[k].status;
                ret = res[k].code;
            }
        }
        shl_remote_results_cleanup(res, n);
    }
    bson_free(reqs);
    bson_free(res);
    bson_strfreev(ids);
    return ret;
}

/* Run 'cmd' on the config server's admin database. */
int
shard_ddl_to_config(shl_coord_t *c, const bson_t *cmd, shl_status_t *st)
{
    shl_remote_target_t cfg = shl_remote_target_config();
    bson_t reply;
    int ret = shl_remote_run(shl_coord_remote(c), &cfg, "admin", cmd, &shard_ddl_opts, &reply, st);

    bson_destroy(&reply);
    return ret;
}

int
shard_ddl_set_allow_migrations(shl_coord_t *c, const char *ns, const bson_t *doc,
                               const char *uuid_field, bool allow, shl_status_t *st)
{
    bson_t cmd = BSON_INITIALIZER;
    bson_iter_t it;
    int ret;

    BSON_APPEND_UTF8(&cmd, "_configsvrSetAllowMigrations", ns);
    BSON_APPEND_BOOL(&cmd, "allowMigrations", allow);
    if (bson_iter_init_find(&it, doc, uuid_field)) {
        bson_append_iter(&cmd, "collectionUUID", -1, &it);
    }
    ret = shard_ddl_to_config(c, &cmd, st);
    bson_destroy(&cmd);
    return ret;
}

bool
shard_ddl_owns_op(const bson_t *doc, const char *op)
{
    bson_iter_t it;

    return bson_iter_init(&it, doc) && bson_iter_find_descendant(&it, "_id.operationType", &it) &&
           BSON_ITER_HOLDS_UTF8(&it) && strcmp(bson_iter_utf8(&it, NULL), op) == 0;
}

bool
shard_ddl_doc_bool(const bson_t *doc, const char *field)
{
    bson_iter_t it;

    return bson_iter_init_find(&it, doc, field) && bson_iter_as_bool(&it);
}

/* ------------------------------------------------------------------ kinds and entry */

void
shard_ddl_kind_setup(shard_ddl_kind_t *kind, shard_ddl_locks_t *locks, shard_ddl_db_check_fn check,
                     void *check_arg)
{
    kind->locks = locks;
    kind->db_check = check;
    kind->db_check_arg = check_arg;
}

int
shard_ddl_start(shl_coord_service_t *svc, const shl_coord_type_t *t, const char *ns,
                const bson_t *fields, const bson_t *dbv, bson_t *reply, shl_status_t *st)
{
    const shard_ddl_kind_t *kind = t->arg;
    bson_t doc = BSON_INITIALIZER, id, result;
    int ret;

    BSON_APPEND_DOCUMENT_BEGIN(&doc, "_id", &id);
    BSON_APPEND_UTF8(&id, "namespace", ns);
    BSON_APPEND_UTF8(&id, "operationType", kind->op);
    bson_append_document_end(&doc, &id);
    if (fields != NULL) {
        bson_concat(&doc, fields);
    }
    if (dbv != NULL) {
        BSON_APPEND_DOCUMENT(&doc, "databaseVersion", dbv);
    }
    ret = shl_coord_run(svc, t, &doc, 0, &result, st);
    if (ret == 0 && reply != NULL) {
        bson_concat(reply, &result);
    }
    bson_destroy(&result);
    bson_destroy(&doc);
    return ret;
}

/* Two values of 'field' (either may be missing) are the same bytes. */
static bool
same_field(const bson_t *a, const bson_t *b, const char *field)
{
    bson_iter_t ia, ib;
    bool ha = bson_iter_init_find(&ia, a, field), hb = bson_iter_init_find(&ib, b, field);
    bson_t da, db;
    bool eq;

    if (!ha || !hb) {
        return ha == hb;
    }
    if (bson_iter_type(&ia) != bson_iter_type(&ib)) {
        return false;
    }
    /* Compare the two values as one-field documents. */
    bson_init(&da);
    bson_init(&db);
    bson_append_iter(&da, "v", 1, &ia);
    bson_append_iter(&db, "v", 1, &ib);
    eq = bson_equal(&da, &db);
    bson_destroy(&da);
    bson_destroy(&db);
    return eq;
}

bool
shard_ddl_same(const shard_ddl_kind_t *kind, const bson_t *running, const bson_t *request)
{
    for (size_t k = 0; kind->same_fields != NULL && kind->same_fields[k] != NULL; k++) {
        if (!same_field(running, request, kind->same_fields[k])) {
            return false;
        }
    }
    return true;
}

/* ------------------------------------------------------------------------- DDL locks */

static bool
coord_interrupted(void *arg)
{
    return shl_coord_interrupted(arg);
}

/* The resources the operation locks: [0] the database in the kind's mode, then up to two
 * collections in X in name order (two renames crossing each other's names cannot
 * deadlock). Returns how many. */
static size_t
lock_names(const shard_ddl_kind_t *kind, const bson_t *doc, char names[3][SHL_NS_MAX + 1])
{
    char ns[SHL_NS_MAX + 1];
    bson_iter_t it;
    size_t n = 1;

    shard_ddl_doc_namespace(doc, ns, sizeof ns);
    snprintf(names[0], SHL_NS_MAX + 1, "%.*s", (int)strcspn(ns, "."), ns);
    if (kind->db_mode == SHARD_DDL_X) {
        return n;
    }
    snprintf(names[n++], SHL_NS_MAX + 1, "%s", ns);
    if (kind->also != NULL && bson_iter_init_find(&it, doc, kind->also) &&
        BSON_ITER_HOLDS_UTF8(&it)) {
        const char *other = bson_iter_utf8(&it, NULL);
        const char *lo = strcmp(other, ns) < 0 ? other : ns;
        const char *hi = lo == other ? ns : other;

        snprintf(names[1], SHL_NS_MAX + 1, "%s", lo);
        snprintf(names[n], SHL_NS_MAX + 1, "%s", hi);
        n++;
    }
    return n;
}

/*
 * The locks, in order; then, for a request (not a resume), its databaseVersion again: a
 * request that passed its check and then waited (behind a dropDatabase, say) must not act
 * on a database that was dropped and created again, or whose primary moved, meanwhile.
 */
int
shard_ddl_acquire(shl_coord_t *c, shl_status_t *st)
{
    const shard_ddl_kind_t *kind = shl_coord_type_arg(c);
    const bson_t *doc = shl_coord_doc(c);
    char names[3][SHL_NS_MAX + 1], ns[SHL_NS_MAX + 1];
    size_t n = lock_names(kind, doc, names), held = 0;
    bson_iter_t it;
    int ret = 0;

    while (held < n && ret == 0) {
        ret = shard_ddl_lock_acquire(kind->locks, names[held],
                                     held == 0 ? kind->db_mode : SHARD_DDL_X, kind->op, 0,
                                     coord_interrupted, c, st);
        held += ret == 0 ? 1 : 0;
    }
    if (ret != 0 && shl_coord_interrupted(c)) {
        /* The shutdown's or a step-down's error, whichever stopped the wait. */
        shl_status_clear(st);
        ret = shl_coord_check_halted(c, st);
    }
    SHL_ERR(ret);
    if (!shl_coord_resumed(c) && kind->db_check != NULL &&
        bson_iter_init_find(&it, doc, "databaseVersion") && BSON_ITER_HOLDS_DOCUMENT(&it)) {
        const uint8_t *data;
        uint32_t len;
        bson_t dbv;

        bson_iter_document(&it, &len, &data);
        SHL_INVARIANT(bson_init_static(&dbv, data, len));
        shard_ddl_doc_namespace(doc, ns, sizeof ns);
        SHL_ERR(kind->db_check(kind->db_check_arg, ns, &dbv, st));
    }
done:
    if (ret != 0) {
        while (held > 0) {
            held--;
            shard_ddl_lock_release(kind->locks, names[held],
                                   held == 0 ? kind->db_mode : SHARD_DDL_X);
        }
    }
    return ret;
}

void
shard_ddl_release(shl_coord_t *c)
{
    const shard_ddl_kind_t *kind = shl_coord_type_arg(c);
    char names[3][SHL_NS_MAX + 1];
    size_t n = lock_names(kind, shl_coord_doc(c), names);

    while (n > 0) {
        n--;
        shard_ddl_lock_release(kind->locks, names[n], n == 0 ? kind->db_mode : SHARD_DDL_X);
    }
}

/* currentOp's locks of a running coordinator, as MongoDB 7.0 names the DDL lock resources
 * and modes ("w" intent exclusive, "W" exclusive): a namespace without a collection is a
 * database DDL (the database in X). */
void
shard_ddl_report_held(const bson_t *doc, bson_t *op)
{
    char ns[SHL_NS_MAX + 1];
    bson_t locks;

    shard_ddl_doc_namespace(doc, ns, sizeof ns);
    BSON_APPEND_DOCUMENT_BEGIN(op, "locks", &locks);
    if (strchr(ns, '.') == NULL) {
        BSON_APPEND_UTF8(&locks, "DDLDatabase", "W");
    } else {
        BSON_APPEND_UTF8(&locks, "DDLDatabase", "w");
        BSON_APPEND_UTF8(&locks, "DDLCollection", "W");
    }
    bson_append_document_end(op, &locks);
}

/* ------------------------------------------------------------------ common phase steps */

static int
freeze_or_resume(shl_coord_t *c, bool allow, shl_status_t *st)
{
    char ns[SHL_NS_MAX + 1];

    if (!shard_ddl_doc_bool(shl_coord_doc(c), "freezeMigrations")) {
        return 0;
    }
    shard_ddl_doc_namespace(shl_coord_doc(c), ns, sizeof ns);
    return shard_ddl_set_allow_migrations(c, ns, shl_coord_doc(c), "collectionUUID", allow, st);
}

int
shard_ddl_phase_freeze_migrations(shl_coord_t *c, shl_status_t *st)
{
    return freeze_or_resume(c, false, st);
}

int
shard_ddl_resume_migrations(shl_coord_t *c, shl_status_t *st)
{
    return freeze_or_resume(c, true, st);
}

int
shard_ddl_block(shl_coord_t *c, const char *why, bool block, bool self_only, shl_status_t *st)
{
    shl_remote_target_t self = shl_remote_target_self();
    char ns[SHL_NS_MAX + 1];
    shl_ns_t parsed;
    bson_t cmd = BSON_INITIALIZER, reason, reply = BSON_INITIALIZER;
    int ret = 0;

    shard_ddl_doc_namespace(shl_coord_doc(c), ns, sizeof ns);
    SHL_ERR(shl_ns_parse(&parsed, ns, st));
    BSON_APPEND_UTF8(&cmd, "_shardsvrParticipantBlock", parsed.coll);
    BSON_APPEND_UTF8(&cmd, "blockType", block ? "ReadsAndWrites" : "Unblock");
    BSON_APPEND_DOCUMENT_BEGIN(&cmd, "reason", &reason);
    BSON_APPEND_UTF8(&reason, "command", why);
    BSON_APPEND_UTF8(&reason, "ns", ns);
    bson_append_document_end(&cmd, &reason);
    if (self_only) {
        bson_destroy(&reply);
        SHL_ERR(shl_remote_run(shl_coord_remote(c), &self, parsed.db, &cmd, &shard_ddl_opts, &reply,
                               st));
    } else {
        SHL_ERR(shard_ddl_to_participants(c, parsed.db, &cmd, st));
    }
done:
    bson_destroy(&reply);
    bson_destroy(&cmd);
    return ret;
}

int
shard_ddl_commit(shl_coord_t *c, const shl_remote_target_t *target, const char *db,
                 const bson_t *cmd, int (*undo)(shl_coord_t *c, shl_status_t *st), bson_t *reply,
                 shl_status_t *st)
{
    int ret = shl_remote_run(shl_coord_remote(c), target, db, cmd, &shard_ddl_opts, reply, st);

    if (ret != 0 && !shl_remote_is_retryable(ret)) {
        shl_status_t undo_st = SHL_STATUS_INIT;
        int uret = undo != NULL ? undo(c, &undo_st) : 0;

        if (uret != 0) {
            /* What the operation did stays until the phase runs again (the undo's error is
             * retryable, or the operation stays for the next start). */
            *st = undo_st;
            ret = uret;
        } else {
            shl_coord_abort(c);
        }
    }
    return ret;
}

const bson_t *
shard_ddl_cmd_dbv(const bson_t *cmd, bson_t *view)
{
    bson_iter_t it;
    const uint8_t *data;
    uint32_t len;

    if (!bson_iter_init_find(&it, cmd, "databaseVersion") || !BSON_ITER_HOLDS_DOCUMENT(&it)) {
        return NULL;
    }
    bson_iter_document(&it, &len, &data);
    SHL_INVARIANT(bson_init_static(view, data, len));
    return view;
}
