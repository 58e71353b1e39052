/*
 * configsvr_rename.c -- _configsvrRenameCollection: renameCollection where the source or the
 * target is sharded (docs/design/sharding-protocol.md "Renaming a sharded collection";
 * MongoDB 5.0+'s RenameCollectionCoordinator, run here on the config server). Under both
 * namespaces' locks: checks, a coordinator document in config.renameCollectionCoordinators,
 * the target dropped (dropTarget over a sharded target), every shard blocks both namespaces
 * and renames its local copy (_shardsvrRenameCollectionParticipant), config.collections
 * moves to the new name with the same UUID and a new epoch/timestamp (config.chunks is keyed
 * by UUID and stays), config.tags follow, every shard refreshes and unblocks, the document
 * is removed. Past the document the rename only rolls forward: every step is idempotent, and
 * a crash or a failure leaves the document for the recovery thread, which runs it again.
 */
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/failpoint.h"
#include "base/log.h"
#include "base/namespace.h"
#include "bson/bson_iter.h"
#include "config/config_private.h"

#define COORD_COLL "renameCollectionCoordinators"

/* After the coordinator document is written, before anything else changes. */
SHL_FAILPOINT_DEFINE(hangRenameCollectionAfterStart)
/* After every shard blocked and renamed locally, before the config.* commit. */
SHL_FAILPOINT_DEFINE(hangRenameCollectionBeforeCommit)
/* After the config.* commit, before the shards are unblocked. */
SHL_FAILPOINT_DEFINE(hangRenameCollectionBeforeUnblock)

/* One rename, as its coordinator document holds it. */
typedef struct rename_req {
    shl_ns_t from, to;
    bool drop_target;
    bool sharded;    /* the source is sharded */
    shl_uuid_t uuid; /* the source's UUID */
} rename_req_t;

/* The recovery thread (guarded by rec_mu). */
static pthread_mutex_t rec_mu = PTHREAD_MUTEX_INITIALIZER;
static bool rec_running, rec_again, rec_joinable;
static pthread_t rec_thread;
static atomic_bool rec_stop;

/* ---------------------------------------------------------------- helpers */

static void
lock_pair(const rename_req_t *r)
{
    bool from_first = strcmp(r->from.full, r->to.full) < 0;

    cfg_lock_ns(from_first ? r->from.full : r->to.full);
    cfg_lock_ns(from_first ? r->to.full : r->from.full);
}

static void
unlock_pair(const rename_req_t *r)
{
    cfg_unlock_ns(r->from.full);
    cfg_unlock_ns(r->to.full);
}

static void
req_to_doc(const rename_req_t *r, bson_t *out)
{
    bson_init(out);
    BSON_APPEND_UTF8(out, "_id", r->from.full);
    BSON_APPEND_UTF8(out, "to", r->to.full);
    BSON_APPEND_BOOL(out, "dropTarget", r->drop_target);
    BSON_APPEND_BOOL(out, "sourceSharded", r->sharded);
    shl_uuid_append(out, "sourceUUID", &r->uuid);
}

static int
req_from_doc(const bson_t *doc, rename_req_t *r, shl_status_t *st)
{
    int ret = 0;
    bson_iter_t it;

    memset(r, 0, sizeof(*r));
    if (!bson_iter_init_find(&it, doc, "_id") || !BSON_ITER_HOLDS_UTF8(&it)) {
        SHL_FAIL(st, SHL_CODE_BAD_VALUE, "rename coordinator document without _id");
    }
    SHL_ERR(shl_ns_parse(&r->from, bson_iter_utf8(&it, NULL), st));
    if (!bson_iter_init_find(&it, doc, "to") || !BSON_ITER_HOLDS_UTF8(&it)) {
        SHL_FAIL(st, SHL_CODE_BAD_VALUE, "rename coordinator document without to");
    }
    SHL_ERR(shl_ns_parse(&r->to, bson_iter_utf8(&it, NULL), st));
    r->drop_target = bson_iter_init_find(&it, doc, "dropTarget") && bson_iter_as_bool(&it);
    r->sharded = bson_iter_init_find(&it, doc, "sourceSharded") && bson_iter_as_bool(&it);
    if (!bson_iter_init_find(&it, doc, "sourceUUID")) {
        SHL_FAIL(st, SHL_CODE_BAD_VALUE, "rename coordinator document without sourceUUID");
    }
    SHL_ERR(shl_idl_read_uuid(&it, "renameCollectionCoordinator.sourceUUID", &r->uuid, st));
done:
    return ret;
}

/* Send 'cmd' to every shard of config.shards (the collection's database); stop at the first
 * error. */
static int
all_shards_cmd(const char *db, const bson_t *cmd, shl_status_t *st)
{
    int ret = 0;
    shl_shard_type_t *shards = NULL;
    size_t n = 0;

    SHL_ERR(cfg_get_shards(&shards, &n, st));
    for (size_t i = 0; i < n; i++) {
        bson_t reply;
        ret = cfg_shard_cmd(shards[i].name, db, cmd, &reply, st);
        bson_destroy(&reply);
        if (ret != 0) {
            goto done;
        }
    }
done:
    if (shards != NULL) {
        cfg_shards_free(shards, n);
    }
    return ret;
}

/* config.collections and config.tags under the new name: same UUID, a new generation
 * (MongoDB's rename bumps the epoch and timestamp). Idempotent. */
static int
commit_metadata(shl_op_ctx_t *op, const rename_req_t *r, shl_status_t *st)
{
    int ret = 0;
    shl_collection_type_t coll;
    bool found = false, batch_ok = false;
    bson_t *q = NULL, *u = NULL, details = BSON_INITIALIZER, cdoc;
    cfg_batch_t b;
    bson_value_t id;

    memset(&coll, 0, sizeof(coll));
    SHL_ERR(cfg_get_collection(r->to.full, &coll, &found, st));
    if (found && shl_uuid_eq(&coll.uuid, &r->uuid)) {
        goto done; /* committed before a crash */
    }
    if (found) {
        shl_collection_type_cleanup(&coll);
        memset(&coll, 0, sizeof(coll));
    }
    SHL_ERR(cfg_get_collection(r->from.full, &coll, &found, st));
    if (!found || !shl_uuid_eq(&coll.uuid, &r->uuid)) {
        SHL_FAIL(st, SHL_CODE_CONFLICTING_OPERATION_IN_PROGRESS,
                 "The sharded collection %s being renamed is no longer in config.collections",
                 r->from.full);
    }
    /* Zones first: a re-run finds them renamed already. */
    q = BCON_NEW("ns", BCON_UTF8(r->from.full));
    u = BCON_NEW("$set", "{", "ns", BCON_UTF8(r->to.full), "}");
    SHL_ERR(cfg_update("tags", q, u, false, true, NULL, st));

    bson_free(coll.ns);
    coll.ns = bson_strdup(r->to.full);
    coll.has_epoch = true;
    bson_oid_init(&coll.epoch, NULL);
    coll.timestamp = cfg_fresh_ts();
    coll.updated_at = shl_clock_wall_ms();
    shl_collection_type_to_bson(&coll, &cdoc);
    cfg_batch_init(&b);
    batch_ok = true;
    id.value_type = BSON_TYPE_UTF8;
    id.value.v_utf8.str = (char *)(uintptr_t)r->from.full;
    id.value.v_utf8.len = (uint32_t)strlen(r->from.full);
    cfg_batch_delete(&b, "collections", &id);
    cfg_batch_upsert(&b, "collections", &cdoc);
    bson_destroy(&cdoc);
    SHL_ERR(cfg_batch_commit(&b, st));
    BSON_APPEND_UTF8(&details, "from", r->from.full);
    BSON_APPEND_UTF8(&details, "to", r->to.full);
    shl_uuid_append(&details, "uuid", &r->uuid);
    cfg_changelog(op, "renameCollection.metadata", r->from.full, &details);
done:
    if (batch_ok) {
        cfg_batch_cleanup(&b);
    }
    if (q != NULL) {
        bson_destroy(q);
    }
    if (u != NULL) {
        bson_destroy(u);
    }
    shl_collection_type_cleanup(&coll);
    bson_destroy(&details);
    return ret;
}

/*
 * Run (or finish) the rename of its coordinator document: every step can run again after a
 * crash or a failure and ends where a first run would have. The caller holds both locks.
 */
static int
run_locked(shl_op_ctx_t *op, const rename_req_t *r, shl_status_t *st)
{
    int ret = 0;
    shl_collection_type_t target;
    bool found = false;
    bson_t part = BSON_INITIALIZER, unblock = BSON_INITIALIZER, details = BSON_INITIALIZER;
    bson_t *q = NULL;

    memset(&target, 0, sizeof(target));
    /* dropTarget over a sharded target: drop it everywhere with its metadata. After the
     * commit the target's entry is the renamed collection (same UUID): leave that one. */
    if (r->drop_target) {
        SHL_ERR(cfg_get_collection(r->to.full, &target, &found, st));
        if (found && !(r->sharded && shl_uuid_eq(&target.uuid, &r->uuid))) {
            SHL_ERR(cfg_drop_collection_locked(op, &r->to, st));
        }
    }

    BSON_APPEND_UTF8(&part, "_shardsvrRenameCollectionParticipant", r->from.coll);
    BSON_APPEND_UTF8(&part, "to", r->to.full);
    BSON_APPEND_BOOL(&part, "dropTarget", r->drop_target);
    shl_uuid_append(&part, "sourceUUID", &r->uuid);
    {
        /* A child of its own: reinitialising a finished child would write into 'part'. */
        bson_t wc;
        BSON_APPEND_DOCUMENT_BEGIN(&part, "writeConcern", &wc);
        BSON_APPEND_UTF8(&wc, "w", "majority");
        bson_append_document_end(&part, &wc);
    }
    SHL_ERR(all_shards_cmd(r->from.db, &part, st));

    if (SHL_FAILPOINT_FIRES(hangRenameCollectionBeforeCommit)) {
        shl_failpoint_pause_while_set(SHL_FAILPOINT(hangRenameCollectionBeforeCommit), &rec_stop);
    }
    if (r->sharded) {
        SHL_ERR(commit_metadata(op, r, st));
    }
    if (SHL_FAILPOINT_FIRES(hangRenameCollectionBeforeUnblock)) {
        shl_failpoint_pause_while_set(SHL_FAILPOINT(hangRenameCollectionBeforeUnblock), &rec_stop);
    }

    BSON_APPEND_UTF8(&unblock, "_shardsvrRenameCollectionUnblockParticipant", r->from.coll);
    BSON_APPEND_UTF8(&unblock, "to", r->to.full);
    SHL_ERR(all_shards_cmd(r->from.db, &unblock, st));

    q = BCON_NEW("_id", BCON_UTF8(r->from.full));
    SHL_ERR(cfg_delete(COORD_COLL, q, false, NULL, st));
    BSON_APPEND_UTF8(&details, "from", r->from.full);
    BSON_APPEND_UTF8(&details, "to", r->to.full);
    BSON_APPEND_BOOL(&details, "dropTarget", r->drop_target);
    cfg_changelog(op, "renameCollection.end", r->from.full, &details);
    SHL_LOG_INFO(SHARDING, 4200140, "renamed collection", "from", BCON_UTF8(r->from.full), "to",
                 BCON_UTF8(r->to.full));
done:
    if (q != NULL) {
        bson_destroy(q);
    }
    shl_collection_type_cleanup(&target);
    bson_destroy(&part);
    bson_destroy(&unblock);
    bson_destroy(&details);
    return ret;
}

/* Finish the coordinator documents that name 'a' or 'b' (source or target); the caller
 * holds both locks (a document naming them was written under the same locks). */
static int
finish_pending(shl_op_ctx_t *op, const char *a, const char *b, shl_status_t *st)
{
    int ret = 0;
    cfg_docs_t d = {0};
    bson_t *q =
        BCON_NEW("$or", "[", "{", "_id", "{", "$in", "[", BCON_UTF8(a), BCON_UTF8(b), "]", "}", "}",
                 "{", "to", "{", "$in", "[", BCON_UTF8(a), BCON_UTF8(b), "]", "}", "}", "]");

    SHL_ERR(cfg_find(COORD_COLL, q, NULL, &d, st));
    for (size_t i = 0; i < d.n; i++) {
        rename_req_t r;
        SHL_ERR(req_from_doc(d.docs[i], &r, st));
        /* Same two names (a pending document always names the pair it locked). */
        if (!((strcmp(r.from.full, a) == 0 && strcmp(r.to.full, b) == 0) ||
              (strcmp(r.from.full, b) == 0 && strcmp(r.to.full, a) == 0))) {
            SHL_FAIL(st, SHL_CODE_CONFLICTING_OPERATION_IN_PROGRESS,
                     "Another rename of %s to %s is being recovered", r.from.full, r.to.full);
        }
        SHL_ERR(run_locked(op, &r, st));
    }
done:
    cfg_docs_cleanup(&d);
    bson_destroy(q);
    return ret;
}

/* ---------------------------------------------------------------- recovery thread */

static void *
recover_main(void *arg)
{
    (void)arg;
    for (;;) {
        cfg_docs_t d = {0};
        shl_status_t st;
        size_t left = 0;

        shl_status_clear(&st);
        pthread_mutex_lock(&rec_mu);
        rec_again = false;
        pthread_mutex_unlock(&rec_mu);
        if (cfg_find(COORD_COLL, NULL, NULL, &d, &st) != 0) {
            left = 1;
        }
        for (size_t i = 0; i < d.n && !atomic_load(&rec_stop); i++) {
            rename_req_t r;
            bson_t *q = NULL, one;
            bool found = false;
            if (req_from_doc(d.docs[i], &r, &st) != 0) {
                SHL_LOG_WARNING(SHARDING, 4200141, "bad rename coordinator document", "error",
                                BCON_UTF8(st.reason));
                continue;
            }
            lock_pair(&r);
            /* Still pending? A request may have finished it meanwhile. */
            q = BCON_NEW("_id", BCON_UTF8(r.from.full));
            if (cfg_find_one(COORD_COLL, q, &one, &found, &st) == 0 && found &&
                run_locked(NULL, &r, &st) != 0) {
                left++;
                SHL_LOG_WARNING(SHARDING, 4200142, "rename recovery failed, will retry", "from",
                                BCON_UTF8(r.from.full), "error", BCON_UTF8(st.reason));
            }
            bson_destroy(&one);
            bson_destroy(q);
            unlock_pair(&r);
        }
        cfg_docs_cleanup(&d);
        pthread_mutex_lock(&rec_mu);
        if ((left == 0 && !rec_again) || atomic_load(&rec_stop)) {
            rec_running = false;
            pthread_mutex_unlock(&rec_mu);
            break;
        }
        pthread_mutex_unlock(&rec_mu);
        for (int i = 0; i < 10 && !atomic_load(&rec_stop); i++) {
            usleep(100 * 1000);
        }
    }
    return NULL;
}

void
cfg_rename_recover_start(void)
{
    pthread_mutex_lock(&rec_mu);
    if (atomic_load(&rec_stop)) {
        /* shutting down */
    } else if (rec_running) {
        rec_again = true;
    } else {
        if (rec_joinable) {
            pthread_join(rec_thread, NULL);
            rec_joinable = false;
        }
        if (pthread_create(&rec_thread, NULL, recover_main, NULL) == 0) {
            rec_running = true;
            rec_joinable = true;
        }
    }
    pthread_mutex_unlock(&rec_mu);
}

void
cfg_rename_recover_stop(void)
{
    bool join;

    atomic_store(&rec_stop, true);
    pthread_mutex_lock(&rec_mu);
    join = rec_joinable;
    rec_joinable = false;
    pthread_mutex_unlock(&rec_mu);
    if (join) {
        pthread_join(rec_thread, NULL);
    }
}

/* ---------------------------------------------------------------- the command */

static int
cmd_rename(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    int ret = 0;
    const char *from_s = NULL, *to_s = NULL;
    rename_req_t r;
    bson_iter_t it;
    bool locked = false, found = false, found_db = false, exists = false, is_view = false;
    shl_collection_type_t src, dst;
    shl_database_type_t db;
    shl_shard_type_t *shards = NULL;
    size_t nshards = 0;
    bson_t doc = BSON_INITIALIZER, details = BSON_INITIALIZER, fwd = BSON_INITIALIZER, freply;
    bson_t *q = NULL;

    (void)reply;
    memset(&r, 0, sizeof(r));
    memset(&src, 0, sizeof(src));
    memset(&dst, 0, sizeof(dst));
    memset(&db, 0, sizeof(db));
    bson_init(&freply);
    SHL_ERR(cfg_cmd_string(cmd, &from_s, st));
    if (!bson_iter_init_find(&it, cmd, "to") || !BSON_ITER_HOLDS_UTF8(&it)) {
        SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH, "'to' must be of type string");
    }
    to_s = bson_iter_utf8(&it, NULL);
    r.drop_target = bson_iter_init_find(&it, cmd, "dropTarget") && bson_iter_as_bool(&it);
    if (shl_ns_parse(&r.from, from_s, st) != 0) {
        SHL_FAIL(st, SHL_CODE_INVALID_NAMESPACE, "Invalid source namespace: %s", from_s);
    }
    if (shl_ns_parse(&r.to, to_s, st) != 0) {
        SHL_FAIL(st, SHL_CODE_INVALID_NAMESPACE, "Invalid target namespace: %s", to_s);
    }
    if (strcmp(r.from.db, r.to.db) != 0) {
        SHL_FAIL(st, SHL_CODE_COMMAND_FAILED,
                 "Source and destination collections must be on the same database.");
    }
    if (strcmp(r.from.full, r.to.full) == 0) {
        SHL_FAIL(st, SHL_CODE_ILLEGAL_OPERATION, "Can't rename a collection to itself");
    }
    if (shl_ns_is_system(&r.to) || shl_ns_is_system(&r.from)) {
        SHL_FAIL(st, SHL_CODE_ILLEGAL_OPERATION,
                 "Can't rename a sharded collection to or from a system namespace (%s -> %s)",
                 r.from.full, r.to.full);
    }
    lock_pair(&r);
    locked = true;
    SHL_ERR(finish_pending(op, r.from.full, r.to.full, st));

    SHL_ERR(cfg_get_database(r.from.db, &db, &found_db, st));
    if (!found_db) {
        SHL_FAIL(st, SHL_CODE_NAMESPACE_NOT_FOUND, "Source collection %s does not exist",
                 r.from.full);
    }
    SHL_ERR(cfg_get_collection(r.from.full, &src, &r.sharded, st));
    SHL_ERR(cfg_get_collection(r.to.full, &dst, &found, st));
    if (r.sharded) {
        r.uuid = src.uuid;
    } else {
        SHL_ERR(
            cfg_shard_collection_info(db.primary, &r.from, &exists, &r.uuid, &is_view, NULL, st));
        if (!exists) {
            SHL_FAIL(st, SHL_CODE_NAMESPACE_NOT_FOUND, "Source collection %s does not exist",
                     r.from.full);
        }
        if (!found || is_view) {
            /* Nothing sharded (any more): the primary shard renames, as for an unsharded
             * collection. */
            bson_iter_init(&it, cmd);
            while (shl_iter_next(&it)) {
                const char *k = shl_iter_key(&it);
                if (strcmp(k, "_configsvrRenameCollection") == 0) {
                    BSON_APPEND_UTF8(&fwd, "renameCollection", r.from.full);
                } else if (strcmp(k, "to") == 0 || strcmp(k, "dropTarget") == 0) {
                    bson_append_iter(&fwd, k, -1, &it);
                }
            }
            ret = cfg_shard_cmd(db.primary, "admin", &fwd, &freply, st);
            goto done;
        }
    }
    if (found && !r.drop_target) {
        SHL_FAIL(st, SHL_CODE_NAMESPACE_EXISTS,
                 "Sharded target collection %s exists but dropTarget is not set", r.to.full);
    }
    /* Every shard, so that no participant fails once the rename started: an unsharded
     * target (on the primary, or left on another shard) needs dropTarget, and a copy of the
     * source must have the source's UUID (the participant refuses another one). */
    SHL_ERR(cfg_get_shards(&shards, &nshards, st));
    for (size_t i = 0; i < nshards; i++) {
        shl_uuid_t other;
        if (!found && !r.drop_target) {
            SHL_ERR(cfg_shard_collection_info(shards[i].name, &r.to, &exists, &other, &is_view,
                                              NULL, st));
            if (exists) {
                SHL_FAIL(st, SHL_CODE_NAMESPACE_EXISTS, "target namespace exists");
            }
        }
        memset(&other, 0, sizeof(other));
        SHL_ERR(cfg_shard_collection_info(shards[i].name, &r.from, &exists, &other, &is_view, NULL,
                                          st));
        if (exists && !shl_uuid_eq(&other, &r.uuid)) {
            SHL_FAIL(st, SHL_CODE_COLLECTION_UUID_MISMATCH,
                     "Collection %s on shard %s has another UUID than the one being renamed",
                     r.from.full, shards[i].name);
        }
        /* No migration of either name runs there (none can start: moveRange checks under
         * the namespace's lock, which this request holds). */
        bson_reinit(&fwd);
        BSON_APPEND_UTF8(&fwd, "_shardsvrRenameCollectionParticipant", r.from.coll);
        BSON_APPEND_UTF8(&fwd, "to", r.to.full);
        BSON_APPEND_BOOL(&fwd, "checkOnly", true);
        bson_reinit(&freply);
        SHL_ERR(cfg_shard_cmd(shards[i].name, r.from.db, &fwd, &freply, st));
    }

    /* The point of no return: from here the rename rolls forward. */
    req_to_doc(&r, &doc);
    q = BCON_NEW("_id", BCON_UTF8(r.from.full));
    SHL_ERR(cfg_update(COORD_COLL, q, &doc, true, false, NULL, st));
    BSON_APPEND_UTF8(&details, "from", r.from.full);
    BSON_APPEND_UTF8(&details, "to", r.to.full);
    BSON_APPEND_BOOL(&details, "dropTarget", r.drop_target);
    BSON_APPEND_BOOL(&details, "sharded", r.sharded);
    cfg_changelog(op, "renameCollection.start", r.from.full, &details);
    if (SHL_FAILPOINT_FIRES(hangRenameCollectionAfterStart)) {
        shl_failpoint_pause_while_set(SHL_FAILPOINT(hangRenameCollectionAfterStart), &rec_stop);
    }
    ret = run_locked(op, &r, st);
    if (ret != 0) {
        /* The document stays: the recovery thread retries until the rename is done. */
        SHL_LOG_WARNING(SHARDING, 4200143, "rename failed past its start, will be finished", "from",
                        BCON_UTF8(r.from.full), "error", BCON_UTF8(st->reason));
        cfg_rename_recover_start();
    }
done:
    if (locked) {
        unlock_pair(&r);
    }
    if (shards != NULL) {
        cfg_shards_free(shards, nshards);
    }
    if (q != NULL) {
        bson_destroy(q);
    }
    shl_collection_type_cleanup(&src);
    shl_collection_type_cleanup(&dst);
    shl_database_type_cleanup(&db);
    bson_destroy(&doc);
    bson_destroy(&details);
    bson_destroy(&fwd);
    bson_destroy(&freply);
    return ret;
}

static const shl_command_t rename_cmd = {
    .name = "_configsvrRenameCollection",
    .run = cmd_rename,
    .flags = SHL_CMD_ADMIN_ONLY | SHL_CMD_INTERNAL,
    .help = "rename a collection whose source or target is sharded (config server)",
};

void
cfg_register_rename_commands(shl_command_registry_t *reg)
{
    shl_command_registry_add(reg, &rename_cmd);
}
