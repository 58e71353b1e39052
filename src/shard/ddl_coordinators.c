/*
 * ddl_coordinators.c -- the dropCollection and dropDatabase coordinators on the database's
 * primary shard (ddl_coordinators.h; seeds/000 "Sharding DDL Coordinator"), and the
 * _shardsvrDropCollection / _shardsvrDropDatabase commands that start or join them. The
 * phases only talk through remote.h (config server, shards by id, self), so their unit tests
 * run them over the fake remote.
 */
#include "shard/ddl_coordinators.h"

#include <string.h>

#include "base/clock.h"
#include "base/log.h"
#include "base/namespace.h"
#include "net/command_args.h"
#include "shard/shard_private.h"

#define OP_DROP_COLL "dropCollection"
#define OP_DROP_DB "dropDatabase"

/* ------------------------------------------------------------------------- helpers */

/* The options of every remote call: durable, retried on retryable errors (idempotent). */
static const shl_remote_options_t k_opts = {.w = "majority",
                                            .timeout_ms = 60000,
                                            .retry = SHL_REMOTE_RETRY_IDEMPOTENT,
                                            .max_attempts = 5,
                                            .backoff_ms = 100};

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
shard_ddl_config_find(shl_coord_t *c, const char *coll, const bson_t *filter, bson_t ***docs, size_t *n,
            shl_status_t *st)
{
    shl_remote_target_t cfg = shl_remote_target_config();
    shl_remote_options_t opts = k_opts;
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
shard_ddl_find_participants(shl_coord_t *c, const char *db, bson_t **colls, size_t ncolls, char ***ids,
                  size_t *n, shl_status_t *st)
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
static bool
participants_of(const bson_t *doc, char ***ids, size_t *n)
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

    participants_of(shl_coord_doc(c), &ids, &n);
    if (n > 0) {
        reqs = bson_malloc0(sizeof *reqs * n);
        res = bson_malloc0(sizeof *res * n);
        for (size_t k = 0; k < n; k++) {
            reqs[k].target = shl_remote_target_shard(ids[k]);
            reqs[k].db = db;
            reqs[k].cmd = cmd;
        }
        shl_remote_run_many(shl_coord_remote(c), reqs, n, &k_opts, res);
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
    int ret = shl_remote_run(shl_coord_remote(c), &cfg, "admin", cmd, &k_opts, &reply, st);

    bson_destroy(&reply);
    return ret;
}

/* The collection's config.collections entry, or false (unsharded or gone). */
static bool
coll_info(const bson_t *doc, bson_t *out)
{
    bson_iter_t it;
    const uint8_t *data;
    uint32_t len;

    if (bson_iter_init_find(&it, doc, "collInfo") && BSON_ITER_HOLDS_DOCUMENT(&it)) {
        bson_iter_document(&it, &len, &data);
        bson_init_static(out, data, len);
        return true;
    }
    return false;
}

/* Append the entry's uuid as 'field' (if it has one). */
static void
append_uuid(bson_t *cmd, const char *field, const bson_t *info)
{
    bson_iter_t it;

    if (bson_iter_init_find(&it, info, "uuid")) {
        bson_append_iter(cmd, field, -1, &it);
    }
}

/* Stop the migrations of the sharded collection 'info' (idempotent). */
static int
stop_migrations(shl_coord_t *c, const char *ns, const bson_t *info, shl_status_t *st)
{
    bson_t cmd = BSON_INITIALIZER;
    int ret;

    BSON_APPEND_UTF8(&cmd, "_configsvrSetAllowMigrations", ns);
    BSON_APPEND_BOOL(&cmd, "allowMigrations", false);
    append_uuid(&cmd, "collectionUUID", info);
    ret = shard_ddl_to_config(c, &cmd, st);
    bson_destroy(&cmd);
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

/* Remove the sharded collection's metadata on the config server (idempotent). */
static int
commit_drop_collection(shl_coord_t *c, const char *ns, const bson_t *info, shl_status_t *st)
{
    bson_t cmd = BSON_INITIALIZER;
    int ret;

    BSON_APPEND_UTF8(&cmd, "_configsvrCommitDropCollection", ns);
    if (info != NULL) {
        append_uuid(&cmd, "collectionUUID", info);
    }
    ret = shard_ddl_to_config(c, &cmd, st);
    bson_destroy(&cmd);
    return ret;
}

/* ------------------------------------------------------------------- DDL locks */

static bool
coord_interrupted(void *arg)
{
    return shl_coord_interrupted(arg);
}

/* The operation's type (_id.operationType), the DDL locks' holder name. */
static const char *
doc_op(const bson_t *doc)
{
    bson_iter_t it;

    if (bson_iter_init(&it, doc) && bson_iter_find_descendant(&it, "_id.operationType", &it) &&
        BSON_ITER_HOLDS_UTF8(&it)) {
        return bson_iter_utf8(&it, NULL);
    }
    return "ddl";
}

int
shard_ddl_coll_lock_acquire(shl_coord_t *c, shl_status_t *st)
{
    shard_ddl_locks_t *l = shl_coord_type_arg(c);
    const char *op = doc_op(shl_coord_doc(c));
    char ns[SHL_NS_MAX + 1];
    shl_ns_t parsed;
    int ret = 0;

    shard_ddl_doc_namespace(shl_coord_doc(c), ns, sizeof ns);
    SHL_ERR(shl_ns_parse(&parsed, ns, st));
    SHL_ERR(shard_ddl_lock_acquire(l, parsed.db, SHARD_DDL_IX, op, 0, coord_interrupted, c, st));
    ret = shard_ddl_lock_acquire(l, parsed.full, SHARD_DDL_X, op, 0, coord_interrupted, c, st);
    if (ret != 0) {
        shard_ddl_lock_release(l, parsed.db, SHARD_DDL_IX);
    }
done:
    return ret;
}

void
shard_ddl_coll_lock_release(shl_coord_t *c)
{
    shard_ddl_locks_t *l = shl_coord_type_arg(c);
    char ns[SHL_NS_MAX + 1];
    shl_ns_t parsed;
    shl_status_t st = SHL_STATUS_INIT;

    shard_ddl_doc_namespace(shl_coord_doc(c), ns, sizeof ns);
    SHL_INVARIANT(shl_ns_parse(&parsed, ns, &st) == 0);
    shard_ddl_lock_release(l, parsed.full, SHARD_DDL_X);
    shard_ddl_lock_release(l, parsed.db, SHARD_DDL_IX);
}

/* dropDatabase: the database in X. */
static int
drop_db_acquire(shl_coord_t *c, shl_status_t *st)
{
    char db[SHL_NS_MAX + 1];

    shard_ddl_doc_namespace(shl_coord_doc(c), db, sizeof db);
    return shard_ddl_lock_acquire(shl_coord_type_arg(c), db, SHARD_DDL_X, OP_DROP_DB, 0,
                                  coord_interrupted, c, st);
}

static void
drop_db_release(shl_coord_t *c)
{
    char db[SHL_NS_MAX + 1];

    shard_ddl_doc_namespace(shl_coord_doc(c), db, sizeof db);
    shard_ddl_lock_release(shl_coord_type_arg(c), db, SHARD_DDL_X);
}

/* currentOp's locks of a running drop, as MongoDB 7.0 names the DDL lock resources and
 * modes ("w" intent exclusive, "W" exclusive). */
void
shard_ddl_coll_lock_report(const bson_t *doc, bson_t *op)
{
    bson_t locks;

    (void)doc;
    BSON_APPEND_DOCUMENT_BEGIN(op, "locks", &locks);
    BSON_APPEND_UTF8(&locks, "DDLDatabase", "w");
    BSON_APPEND_UTF8(&locks, "DDLCollection", "W");
    bson_append_document_end(op, &locks);
}

static void
drop_db_report(const bson_t *doc, bson_t *op)
{
    bson_t locks;

    (void)doc;
    BSON_APPEND_DOCUMENT_BEGIN(op, "locks", &locks);
    BSON_APPEND_UTF8(&locks, "DDLDatabase", "W");
    bson_append_document_end(op, &locks);
}

/* ------------------------------------------------------------ dropCollection phases */

/* freezeCollection: remember the collection's metadata (sharded: config.collections entry)
 * and stop its migrations, so no chunk moves while it is dropped. */
static int
phase_freeze(shl_coord_t *c, shl_status_t *st)
{
    char ns[SHL_NS_MAX + 1];
    bson_t filter = BSON_INITIALIZER, doc = BSON_INITIALIZER, info;
    bson_t **docs = NULL;
    size_t n = 0, nids = 0;
    char **ids = NULL;
    shl_ns_t parsed;
    int ret = 0;

    shard_ddl_doc_namespace(shl_coord_doc(c), ns, sizeof ns);
    BSON_APPEND_UTF8(&filter, "_id", ns);
    SHL_ERR(shard_ddl_config_find(c, "collections", &filter, &docs, &n, st));
    bson_copy_to_excluding_noinit(shl_coord_doc(c), &doc, "collInfo", NULL);
    if (n > 0) {
        BSON_APPEND_DOCUMENT(&doc, "collInfo", docs[0]);
    }
    shl_coord_doc_set(c, &doc);
    /* Who holds its data, remembered for the later phases (the chunks go in dropCollection). */
    SHL_ERR(shl_ns_parse(&parsed, ns, st));
    SHL_ERR(shard_ddl_find_participants(c, parsed.db, docs, n, &ids, &nids, st));
    shard_ddl_set_participants(c, ids, nids);
    if (coll_info(shl_coord_doc(c), &info)) {
        SHL_ERR(stop_migrations(c, ns, &info, st));
    }
done:
    bson_strfreev(ids);
    shard_ddl_docs_free(docs);
    bson_destroy(&doc);
    bson_destroy(&filter);
    return ret;
}

/* _shardsvrParticipantBlock of the collection on every shard. */
static int
participants_block(shl_coord_t *c, bool block, shl_status_t *st)
{
    char ns[SHL_NS_MAX + 1];
    shl_ns_t parsed;
    bson_t cmd = BSON_INITIALIZER, reason;
    int ret = 0;

    shard_ddl_doc_namespace(shl_coord_doc(c), ns, sizeof ns);
    SHL_ERR(shl_ns_parse(&parsed, ns, st));
    BSON_APPEND_UTF8(&cmd, "_shardsvrParticipantBlock", parsed.coll);
    BSON_APPEND_UTF8(&cmd, "blockType", block ? "ReadsAndWrites" : "Unblock");
    BSON_APPEND_DOCUMENT_BEGIN(&cmd, "reason", &reason);
    BSON_APPEND_UTF8(&reason, "command", "drop");
    BSON_APPEND_UTF8(&reason, "ns", ns);
    bson_append_document_end(&cmd, &reason);
    SHL_ERR(shard_ddl_to_participants(c, parsed.db, &cmd, st));
done:
    bson_destroy(&cmd);
    return ret;
}

static int
phase_enter_crit(shl_coord_t *c, shl_status_t *st)
{
    return participants_block(c, true, st);
}

/* dropCollection: the config server's metadata first (routers then see no collection), then
 * the data on every shard. Both steps are idempotent. */
static int
phase_drop(shl_coord_t *c, shl_status_t *st)
{
    char ns[SHL_NS_MAX + 1];
    shl_ns_t parsed;
    bson_t info, cmd = BSON_INITIALIZER;
    bool sharded = coll_info(shl_coord_doc(c), &info);
    int ret = 0;

    shard_ddl_doc_namespace(shl_coord_doc(c), ns, sizeof ns);
    SHL_ERR(shl_ns_parse(&parsed, ns, st));
    if (sharded) {
        SHL_ERR(commit_drop_collection(c, ns, &info, st));
    }
    BSON_APPEND_UTF8(&cmd, "_shardsvrDropCollectionParticipant", parsed.coll);
    if (sharded) {
        append_uuid(&cmd, "collectionUUID", &info);
    }
    SHL_ERR(shard_ddl_to_participants(c, parsed.db, &cmd, st));
    SHL_LOG_INFO(SHARDING, 4170201, "dropped collection", "ns", BCON_UTF8(ns), "sharded",
                 BCON_BOOL(sharded));
done:
    bson_destroy(&cmd);
    return ret;
}

static int
phase_release_crit(shl_coord_t *c, shl_status_t *st)
{
    char ns[SHL_NS_MAX + 1];
    bson_t result = BSON_INITIALIZER;
    int ret = participants_block(c, false, st);

    if (ret == 0) {
        shard_ddl_doc_namespace(shl_coord_doc(c), ns, sizeof ns);
        BSON_APPEND_UTF8(&result, "ns", ns);
        shl_coord_set_result(c, &result);
    }
    bson_destroy(&result);
    return ret;
}

static const shl_coord_phase_t drop_coll_phases[] = {
    {"freezeCollection", phase_freeze, true},
    {"enterCriticalSection", phase_enter_crit, true},
    {"dropCollection", phase_drop, true},
    {"releaseCriticalSection", phase_release_crit, true},
};

/* ------------------------------------------------------------- dropDatabase phase */

/* drop: every sharded collection's metadata (migrations stopped first), the data on every
 * shard, the database's entry, then every shard forgets the database. Idempotent: a resume
 * finds fewer collections and nothing to drop. */
static int
phase_drop_db(shl_coord_t *c, shl_status_t *st)
{
    char db[SHL_NS_MAX + 1], re[SHL_NS_MAX + 16];
    bson_t filter = BSON_INITIALIZER, rx, cmd = BSON_INITIALIZER, result = BSON_INITIALIZER;
    bson_t **colls = NULL;
    size_t n = 0, nids = 0;
    char **ids = NULL;
    int ret = 0;

    shard_ddl_doc_namespace(shl_coord_doc(c), db, sizeof db);
    snprintf(re, sizeof re, "^\\Q%s.\\E", db);
    BSON_APPEND_DOCUMENT_BEGIN(&filter, "_id", &rx);
    BSON_APPEND_UTF8(&rx, "$regex", re);
    bson_append_document_end(&filter, &rx);
    SHL_ERR(shard_ddl_config_find(c, "collections", &filter, &colls, &n, st));
    if (!participants_of(shl_coord_doc(c), &ids, &nids)) {
        /* Who holds the database's data, durably before any metadata goes: a resume of this
         * phase finds fewer collections but must still reach every shard that held one. */
        bson_strfreev(ids);
        SHL_ERR(shard_ddl_find_participants(c, db, colls, n, &ids, &nids, st));
        shard_ddl_set_participants(c, ids, nids);
        SHL_ERR(shl_coord_persist(c, st));
    }
    for (size_t k = 0; k < n; k++) {
        bson_iter_t it;
        if (bson_iter_init_find(&it, colls[k], "_id") && BSON_ITER_HOLDS_UTF8(&it)) {
            const char *ns = bson_iter_utf8(&it, NULL);
            SHL_ERR(stop_migrations(c, ns, colls[k], st));
            SHL_ERR(commit_drop_collection(c, ns, colls[k], st));
        }
    }
    BSON_APPEND_INT32(&cmd, "_shardsvrDropDatabaseParticipant", 1);
    SHL_ERR(shard_ddl_to_participants(c, db, &cmd, st));
    bson_reinit(&cmd);
    BSON_APPEND_UTF8(&cmd, "_configsvrCommitDropDatabase", db);
    SHL_ERR(shard_ddl_to_config(c, &cmd, st));
    bson_reinit(&cmd);
    BSON_APPEND_UTF8(&cmd, "_flushDatabaseCacheUpdates", db);
    SHL_ERR(shard_ddl_to_participants(c, "admin", &cmd, st));
    SHL_LOG_INFO(SHARDING, 4170202, "dropped database", "db", BCON_UTF8(db), "shardedCollections",
                 BCON_INT64((int64_t)n));
    BSON_APPEND_UTF8(&result, "dropped", db);
    shl_coord_set_result(c, &result);
done:
    bson_strfreev(ids);
    shard_ddl_docs_free(colls);
    bson_destroy(&result);
    bson_destroy(&cmd);
    bson_destroy(&filter);
    return ret;
}

static const shl_coord_phase_t drop_db_phases[] = {
    {"drop", phase_drop_db, true},
};

/* ------------------------------------------------------------------------ the types */

bool
shard_ddl_owns_op(const bson_t *doc, const char *op)
{
    bson_iter_t it;

    return bson_iter_init(&it, doc) && bson_iter_find_descendant(&it, "_id.operationType", &it) &&
           BSON_ITER_HOLDS_UTF8(&it) && strcmp(bson_iter_utf8(&it, NULL), op) == 0;
}

static bool
owns_drop_coll(const bson_t *doc)
{
    return shard_ddl_owns_op(doc, OP_DROP_COLL);
}

static bool
owns_drop_db(const bson_t *doc)
{
    return shard_ddl_owns_op(doc, OP_DROP_DB);
}

/* Drops of the same namespace are the same operation, whatever the running one learnt. */
static bool
same_drop(const bson_t *running, const bson_t *request)
{
    (void)running;
    (void)request;
    return true;
}

shl_coord_type_t shard_drop_coll_type = {
    .name = "DropCollectionCoordinator",
    .coll = SHARD_DDL_COORD_COLL,
    .phases = drop_coll_phases,
    .nphases = sizeof drop_coll_phases / sizeof drop_coll_phases[0],
    .same = same_drop,
    .owns = owns_drop_coll,
    .acquire = shard_ddl_coll_lock_acquire,
    .release = shard_ddl_coll_lock_release,
    .report_held = shard_ddl_coll_lock_report,
    .max_attempts = -1, /* MongoDB's DDL coordinators retry retryable errors until done */
    .backoff_ms = 100,
};

shl_coord_type_t shard_drop_db_type = {
    .name = "DropDatabaseCoordinator",
    .coll = SHARD_DDL_COORD_COLL,
    .phases = drop_db_phases,
    .nphases = sizeof drop_db_phases / sizeof drop_db_phases[0],
    .same = same_drop,
    .owns = owns_drop_db,
    .acquire = drop_db_acquire,
    .release = drop_db_release,
    .report_held = drop_db_report,
    .max_attempts = -1,
    .backoff_ms = 100,
};

void
shard_ddl_coords_setup(shard_ddl_locks_t *locks)
{
    shard_drop_coll_type.arg = locks;
    shard_drop_db_type.arg = locks;
    shard_create_coll_type.arg = locks;
    shard_rename_coll_type.arg = locks;
    shard_coll_mod_type.arg = locks;
    shard_refine_type.arg = locks;
}

/* ---------------------------------------------------------------------- entry points */

static int
run_drop(shl_coord_service_t *svc, shl_coord_type_t *t, const char *name, const char *op,
         shl_status_t *st)
{
    bson_t doc = BSON_INITIALIZER, id, result;
    int ret;

    BSON_APPEND_DOCUMENT_BEGIN(&doc, "_id", &id);
    BSON_APPEND_UTF8(&id, "namespace", name);
    BSON_APPEND_UTF8(&id, "operationType", op);
    bson_append_document_end(&doc, &id);
    ret = shl_coord_run(svc, t, &doc, 0, &result, st);
    bson_destroy(&result);
    bson_destroy(&doc);
    return ret;
}

int
shard_ddl_drop_collection(shl_coord_service_t *svc, const char *ns, shl_status_t *st)
{
    return run_drop(svc, &shard_drop_coll_type, ns, OP_DROP_COLL, st);
}

int
shard_ddl_drop_database(shl_coord_service_t *svc, const char *db, shl_status_t *st)
{
    return run_drop(svc, &shard_drop_db_type, db, OP_DROP_DB, st);
}

/* The primary shard checks user write blocking and the request's databaseVersion (a router
 * that routed with an old one gets StaleDbVersion and retries at the right primary). The
 * request carries no shardVersion, so a request joining a running drop does not wait in the
 * collection's critical section that drop holds. 'ns' is "db.coll" or the bare database. */
int
shard_ddl_check_primary(shard_state_t *s, shl_op_ctx_t *op, const char *ns, shl_status_t *st)
{
    shl_db_orphan_filter_t *filter = NULL;
    int ret = 0;

    if (s == NULL || s->coords == NULL) {
        SHL_FAIL(st, SHL_CODE_SHARDING_STATE_NOT_INITIALIZED,
                 "Cannot accept sharding commands if sharding state has not been initialized");
    }
    SHL_ERR(shl_db_sharding_check(op, ns, SHL_DB_SHARD_DDL, &filter, st));
    SHL_INVARIANT(filter == NULL);
    if (atomic_load(&s->ddl_blocked)) {
        SHL_FAIL(st, SHL_CODE_USER_WRITES_BLOCKED,
                 "User writes blocked: new sharded DDL is refused while user write blocking is "
                 "being enabled");
    }
done:
    return ret;
}

int
shard_ddl_drain(void *arg, shl_op_ctx_t *op, bool block, shl_status_t *st)
{
    shard_state_t *s = arg;
    int ret = 0;

    atomic_store(&s->ddl_blocked, block);
    while (block && s->coords != NULL &&
           shl_coord_service_count_coll(s->coords, SHARD_DDL_COORD_COLL) > 0) {
        SHL_ERR(shl_op_check_interrupt(op, st));
        shl_sleep_ms(50);
    }
done:
    if (ret != 0) {
        atomic_store(&s->ddl_blocked, false); /* the mode did not change */
    }
    return ret;
}

static int
cmd_drop_collection(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    shard_state_t *s = shard_state(op);
    const char *coll = NULL;
    shl_ns_t ns;
    int ret = 0;

    SHL_ERR(shl_cmd_collection_arg(cmd, &coll, st));
    SHL_ERR(shl_ns_make(&ns, op->db, coll, st));
    SHL_ERR(shard_ddl_check_primary(s, op, ns.full, st));
    SHL_ERR(shard_ddl_drop_collection(s->coords, ns.full, st));
    BSON_APPEND_UTF8(reply, "ns", ns.full);
done:
    return ret;
}

static int
cmd_drop_database(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    shard_state_t *s = shard_state(op);
    int ret = 0;

    (void)cmd;
    if (strcmp(op->db, "admin") == 0 || strcmp(op->db, "config") == 0 ||
        strcmp(op->db, "local") == 0) {
        SHL_FAIL(st, SHL_CODE_ILLEGAL_OPERATION, "Dropping the '%s' database is prohibited.",
                 op->db);
    }
    SHL_ERR(shard_ddl_check_primary(s, op, op->db, st));
    SHL_ERR(shard_ddl_drop_database(s->coords, op->db, st));
    BSON_APPEND_UTF8(reply, "dropped", op->db);
done:
    return ret;
}

static const shl_command_t ddl_coord_cmds[] = {
    {.name = "_shardsvrDropCollection",
     .run = cmd_drop_collection,
     .flags = SHL_CMD_INTERNAL | SHL_CMD_NEEDS_PRIMARY,
     .help = "internal: drop a collection of this primary shard's database everywhere"},
    {.name = "_shardsvrDropDatabase",
     .run = cmd_drop_database,
     .flags = SHL_CMD_INTERNAL | SHL_CMD_NEEDS_PRIMARY,
     .help = "internal: drop this primary shard's database everywhere"},
};

void
shard_ddl_coords_register(shl_command_registry_t *reg)
{
    for (size_t k = 0; k < sizeof ddl_coord_cmds / sizeof ddl_coord_cmds[0]; k++) {
        shl_command_registry_add(reg, &ddl_coord_cmds[k]);
    }
    shard_ddl_create_register(reg);
    shard_ddl_rename_register(reg);
    shard_ddl_coll_mod_register(reg);
    shard_ddl_refine_register(reg);
}

void
shard_ddl_coords_recover(shard_state_t *s)
{
    shl_coord_type_t *types[] = {&shard_drop_coll_type, &shard_drop_db_type,
                                 &shard_create_coll_type, &shard_rename_coll_type,
                                 &shard_coll_mod_type,    &shard_refine_type};

    for (size_t k = 0; k < sizeof types / sizeof types[0]; k++) {
        shl_status_t st = SHL_STATUS_INIT;
        if (shl_coord_service_recover(s->coords, types[k], &st) != 0) {
            SHL_LOG_WARNING(SHARDING, 4170203, "could not read the DDL coordinators' documents",
                            "type", BCON_UTF8(types[k]->name), "reason", BCON_UTF8(st.reason));
        }
    }
}
