/*
 * migration_destination.c -- the recipient side of a chunk migration (MongoDB's
 * MigrationDestinationManager; seeds/000 "Migrations"): _recvChunkStart registers the
 * incoming migration and starts a thread that waits for overlapping range deletions,
 * persists its pending range deletion task, creates the collection with the donor's
 * indexes, clones the range with _migrateClone, then applies _transferMods until the donor
 * commits (_recvChunkCommit: the last mods, state "done") or aborts (_recvChunkAbort: the
 * task is marked ready so the range deleter removes what was copied). _recvChunkStatus
 * reports the state. The recipient's filtering metadata does not own the range until it
 * refreshes after the commit, so versioned reads filter the incoming documents meanwhile.
 */
#include <string.h>

#include "base/failpoint.h"
#include "base/log.h"
#include "base/options.h"
#include "bson/bson_iter.h"
#include "net/command_args.h"
#include "net/service.h"
#include "net/stmt_batch.h"
#include "base/clock.h"
#include "db/repl_hooks.h"
#include "shard/migration_private.h"
#include "storage/oplog.h"
#include "shard/range_deleter.h"
#include "storage/storage.h"
#include "storage/write.h"

/* MongoDB's: the recipient's thread after cloning, before catching up (an abort ends it). */
SHL_FAILPOINT_DEFINE(migrateThreadHangAtStep3)
/* Shale's: perturb this recipient's range digest so that the donor sees a mismatch. */
SHL_FAILPOINT_DEFINE(migrationCorruptDigest)

static const char *const state_names[] = {"ready",       "clone", "catchup", "steady",
                                          "commitStart", "done",  "fail",    "abort"};

static void
recipient_free(shard_recipient_t *r)
{
    if (r->min != NULL) {
        bson_destroy(r->min);
    }
    if (r->max != NULL) {
        bson_destroy(r->max);
    }
    if (r->key_pattern != NULL) {
        bson_destroy(r->key_pattern);
        shl_shard_key_pattern_cleanup(&r->pattern);
    }
    bson_free(r);
}

static void
set_state(shard_recipient_t *r, mig_recv_state_t state)
{
    pthread_mutex_lock(&r->s->mig_mu);
    if (r->state != MIG_FAIL && r->state != MIG_ABORT) {
        r->state = state;
    }
    pthread_cond_broadcast(&r->s->mig_cv);
    pthread_mutex_unlock(&r->s->mig_mu);
}

static bool
abort_requested(shard_recipient_t *r)
{
    bool a;

    pthread_mutex_lock(&r->s->mig_mu);
    a = r->abort_requested;
    pthread_mutex_unlock(&r->s->mig_mu);
    return a;
}

/* Run a write on the local collection; writeErrors other than DuplicateKey fail it. */
static int
local_write(shard_recipient_t *r, const char *db, const bson_t *cmd, shl_status_t *st)
{
    int ret = 0;
    bson_t reply;
    bson_iter_t it, we, f;

    /* Change streams do not report a migration's writes (fromMigrate). */
    shl_storage_set_from_migrate(true);
    shl_service_run_command(r->s->svc, NULL, cmd, db, &reply);
    shl_storage_set_from_migrate(false);
    SHL_ERR(shl_status_from_reply(&reply, st));
    if (bson_iter_init_find(&it, &reply, "writeErrors") && BSON_ITER_HOLDS_ARRAY(&it) &&
        bson_iter_recurse(&it, &we)) {
        while (shl_iter_next(&we)) {
            int code = 0;
            const char *msg = "write error";
            if (!BSON_ITER_HOLDS_DOCUMENT(&we) || !bson_iter_recurse(&we, &f)) {
                continue;
            }
            while (shl_iter_next(&f)) {
                if (strcmp(shl_iter_key(&f), "code") == 0) {
                    code = (int)bson_iter_as_int64(&f);
                } else if (strcmp(shl_iter_key(&f), "errmsg") == 0 && BSON_ITER_HOLDS_UTF8(&f)) {
                    msg = bson_iter_utf8(&f, NULL);
                }
            }
            if (code != SHL_CODE_DUPLICATE_KEY) {
                SHL_FAIL(st, code != 0 ? code : SHL_CODE_INTERNAL_ERROR, "%s", msg);
            }
        }
    }
done:
    bson_destroy(&reply);
    return ret;
}

/* The donor's options of 'ns' (listCollections), so the recipient enforces the same
 * validator; appended to 'create' as "options" when the donor has the collection. */
static int
append_donor_options(shard_recipient_t *r, const shl_ns_t *ns, bson_t *create, shl_status_t *st)
{
    int ret = 0;
    bson_t cmd = BSON_INITIALIZER, reply = BSON_INITIALIZER, filter, cur, *infos = NULL;
    bson_iter_t it;
    size_t n = 0;

    BSON_APPEND_INT32(&cmd, "listCollections", 1);
    BSON_APPEND_DOCUMENT_BEGIN(&cmd, "filter", &filter);
    BSON_APPEND_UTF8(&filter, "name", ns->coll);
    bson_append_document_end(&cmd, &filter);
    bson_destroy(&reply);
    SHL_ERR(
        shl_remote_run_shard(&r->s->remote, r->from, ns->db, &cmd, &mig_remote_opts, &reply, st));
    if (bson_iter_init_find(&it, &reply, "cursor") && BSON_ITER_HOLDS_DOCUMENT(&it)) {
        const uint8_t *data;
        uint32_t len;
        bson_iter_document(&it, &len, &data);
        bson_init_static(&cur, data, len);
        n = mig_docs_of(&cur, "firstBatch", &infos);
    }
    if (n == 1 && bson_iter_init_find(&it, &infos[0], "options") && BSON_ITER_HOLDS_DOCUMENT(&it)) {
        bson_append_iter(create, "options", -1, &it);
    }
done:
    bson_free(infos);
    bson_destroy(&cmd);
    bson_destroy(&reply);
    return ret;
}

/* The collection created here with its cluster-wide UUID, the donor's indexes and options
 * (_shardsvrCreateCollectionParticipant, run locally), so the range deleter and the
 * filtering metadata agree on it and the recipient validates documents as the donor does. */
static int
create_collection_like_donor(shard_recipient_t *r, const shl_ns_t *ns, shl_status_t *st)
{
    int ret = 0;
    bson_t cmd = BSON_INITIALIZER, reply = BSON_INITIALIZER, *specs = NULL, create;
    bson_t arr;
    size_t n = 0;
    char key[24];
    const char *ks;

    BSON_APPEND_UTF8(&cmd, "listIndexes", ns->coll);
    bson_destroy(&reply);
    SHL_ERR(
        shl_remote_run_shard(&r->s->remote, r->from, ns->db, &cmd, &mig_remote_opts, &reply, st));
    n = mig_cursor_docs(&reply, &specs);
    bson_init(&create);
    BSON_APPEND_UTF8(&create, "_shardsvrCreateCollectionParticipant", ns->coll);
    shl_uuid_append(&create, "collectionUUID", &r->coll_uuid);
    BSON_APPEND_ARRAY_BEGIN(&create, "indexes", &arr);
    for (size_t i = 0; i < n; i++) {
        bson_iter_t f;
        bson_t spec;
        bson_uint32_to_string((uint32_t)i, &ks, key, sizeof(key));
        BSON_APPEND_DOCUMENT_BEGIN(&arr, ks, &spec);
        bson_iter_init(&f, &specs[i]);
        while (shl_iter_next(&f)) {
            if (strcmp(shl_iter_key(&f), "v") != 0 && strcmp(shl_iter_key(&f), "ns") != 0) {
                bson_append_iter(&spec, NULL, 0, &f);
            }
        }
        bson_append_document_end(&arr, &spec);
    }
    bson_append_array_end(&create, &arr);
    ret = append_donor_options(r, ns, &create, st);
    if (ret == 0) {
        ret = local_write(r, ns->db, &create, st);
    }
    bson_destroy(&create);
done:
    bson_free(specs);
    bson_destroy(&cmd);
    bson_destroy(&reply);
    return ret;
}

/* Send the statements of 'b' as one local write ({verb: coll, field: [...]}, unordered),
 * then empty it. The donor's documents go as they are: they were validated (or not) when
 * written. */
static int
flush_stmts(shard_recipient_t *r, const shl_ns_t *ns, const char *verb, const char *field,
            shl_stmt_batch_t *b, shl_status_t *st)
{
    int ret = 0;
    bson_t cmd = BSON_INITIALIZER;

    if (b->n > 0) {
        BSON_APPEND_UTF8(&cmd, verb, ns->coll);
        shl_stmt_batch_append_to(b, &cmd, field);
        BSON_APPEND_BOOL(&cmd, "ordered", false);
        if (strcmp(verb, "delete") != 0) {
            BSON_APPEND_BOOL(&cmd, "bypassDocumentValidation", true);
        }
        ret = local_write(r, ns->db, &cmd, st);
        shl_stmt_batch_clear(b);
    }
    bson_destroy(&cmd);
    return ret;
}

/* Add a statement to 'b', first sending what 'b' holds when the statement would not fit. */
static int
add_stmt(shard_recipient_t *r, const shl_ns_t *ns, const char *verb, const char *field,
         shl_stmt_batch_t *b, const bson_t *stmt, shl_status_t *st)
{
    int ret = 0;

    if (!shl_stmt_batch_has_room(b, stmt->len)) {
        ret = flush_stmts(r, ns, verb, field, b, st);
    }
    if (ret == 0) {
        shl_stmt_batch_append(b, stmt);
    }
    return ret;
}

static int
insert_docs(shard_recipient_t *r, const shl_ns_t *ns, const bson_t *docs, size_t n,
            shl_status_t *st)
{
    int ret = 0;
    shl_stmt_batch_t b;

    shl_stmt_batch_init(&b);
    for (size_t i = 0; i < n; i++) {
        SHL_ERR(add_stmt(r, ns, "insert", "documents", &b, &docs[i], st));
    }
    SHL_ERR(flush_stmts(r, ns, "insert", "documents", &b, st));
done:
    shl_stmt_batch_cleanup(&b);
    return ret;
}

/* Apply one _transferMods reply (upserts of 'reload', deletes of 'deleted', in write
 * batches the local commands accept); *n gets the number of changes. */
static int
apply_mods(shard_recipient_t *r, const shl_ns_t *ns, const bson_t *reply, size_t *n,
           shl_status_t *st)
{
    int ret = 0;
    bson_t *reload = NULL, *deleted = NULL, stmt = BSON_INITIALIZER;
    size_t nr = mig_docs_of(reply, "reload", &reload);
    size_t nd = mig_docs_of(reply, "deleted", &deleted);
    shl_stmt_batch_t b;

    shl_stmt_batch_init(&b);
    *n = nr + nd;
    for (size_t i = 0; i < nr; i++) {
        bson_t q;
        bson_iter_t it;
        bson_reinit(&stmt);
        BSON_APPEND_DOCUMENT_BEGIN(&stmt, "q", &q);
        if (bson_iter_init_find(&it, &reload[i], "_id")) {
            bson_append_value(&q, "_id", 3, bson_iter_value(&it));
        }
        bson_append_document_end(&stmt, &q);
        BSON_APPEND_DOCUMENT(&stmt, "u", &reload[i]);
        BSON_APPEND_BOOL(&stmt, "upsert", true);
        SHL_ERR(add_stmt(r, ns, "update", "updates", &b, &stmt, st));
    }
    SHL_ERR(flush_stmts(r, ns, "update", "updates", &b, st));
    for (size_t i = 0; i < nd; i++) {
        bson_reinit(&stmt);
        BSON_APPEND_DOCUMENT(&stmt, "q", &deleted[i]);
        BSON_APPEND_INT32(&stmt, "limit", 1);
        SHL_ERR(add_stmt(r, ns, "delete", "deletes", &b, &stmt, st));
    }
    SHL_ERR(flush_stmts(r, ns, "delete", "deletes", &b, st));
done:
    shl_stmt_batch_cleanup(&b);
    bson_free(reload);
    bson_free(deleted);
    bson_destroy(&stmt);
    return ret;
}

/* One _getNextSessionMods round: the donor's next entries of the range's retryable-write
 * history into this shard's session catalog; *n gets how many came. */
static int
transfer_session_mods(shard_recipient_t *r, shl_op_ctx_t *op, size_t *n, shl_status_t *st)
{
    int ret = 0;
    bson_t cmd = BSON_INITIALIZER, reply = BSON_INITIALIZER;

    *n = 0;
    BSON_APPEND_UTF8(&cmd, "_getNextSessionMods", r->ns);
    BSON_APPEND_UTF8(&cmd, "sessionId", r->session_id);
    bson_destroy(&reply);
    SHL_ERR(
        shl_remote_run_shard(&r->s->remote, r->from, "admin", &cmd, &mig_remote_opts, &reply, st));
    SHL_ERR(mig_session_apply(r->s, op, &reply, n, st));
done:
    bson_destroy(&cmd);
    bson_destroy(&reply);
    return ret;
}

static int
run_recipient(shard_recipient_t *r, shl_op_ctx_t *op, shl_status_t *st)
{
    int ret = 0;
    shl_ns_t ns;
    bson_t cmd = BSON_INITIALIZER, reply = BSON_INITIALIZER;

    SHL_ERR(shl_ns_parse(&ns, r->ns, st));
    /* Orphans of an earlier migration of this range must go first; MongoDB's recipient
     * waits for them only so long, then fails the migration. */
    SHL_ERR(shl_range_deletion_wait_overlapping(
        op, &r->coll_uuid, r->min, r->max,
        shl_opt_int(SHL_OPT_receiveChunkWaitForRangeDeleterTimeoutMS), st));
    {
        shl_range_task_t t;
        memset(&t, 0, sizeof(t));
        t.id = r->migration_id;
        snprintf(t.ns, sizeof(t.ns), "%s", r->ns);
        t.collection_uuid = r->coll_uuid;
        snprintf(t.donor_shard, sizeof(t.donor_shard), "%s", r->from);
        t.min = r->min;
        t.max = r->max;
        t.key_pattern = r->key_pattern;
        t.pending = true;
        t.when_now = true;
        t.pre_migration_version = shl_chunk_version_unsharded();
        SHL_ERR(shl_range_deletion_persist(op, &t, st));
    }
    SHL_ERR(create_collection_like_donor(r, &ns, st));

    set_state(r, MIG_CLONE);
    BSON_APPEND_UTF8(&cmd, "_migrateClone", r->ns);
    BSON_APPEND_UTF8(&cmd, "sessionId", r->session_id);
    for (;;) {
        bson_t *docs = NULL;
        size_t n;
        size_t bytes = 0;
        if (abort_requested(r)) {
            SHL_FAIL(st, SHL_CODE_COMMAND_FAILED, "migration aborted");
        }
        bson_destroy(&reply);
        SHL_ERR(shl_remote_run_shard(&r->s->remote, r->from, "admin", &cmd, &mig_remote_opts,
                                     &reply, st));
        n = mig_docs_of(&reply, "objects", &docs);
        if (n > 0) {
            ret = mig_cache_pace(r->s, op, true, &r->paced_ms, st);
        }
        if (ret == 0 && n > 0) {
            ret = insert_docs(r, &ns, docs, n, st);
        }
        if (ret == 0 && n > 0 && r->throttle) {
            ret = mig_throttle_wait(r->s, op, &r->throttle_wc, st);
        }
        for (size_t i = 0; i < n; i++) {
            bytes += docs[i].len;
        }
        bson_free(docs);
        SHL_ERR(ret);
        if (n == 0) {
            break;
        }
        {
            size_t ns_n;
            SHL_ERR(transfer_session_mods(r, op, &ns_n, st));
        }
        pthread_mutex_lock(&r->s->mig_mu);
        r->cloned += (int64_t)n;
        r->cloned_bytes += (int64_t)bytes;
        pthread_mutex_unlock(&r->s->mig_mu);
    }

    SHL_LOG_INFO(SHARDING, 4200304, "Incoming migration cloned", "ns", BCON_UTF8(r->ns),
                 "documents", BCON_INT64(r->cloned), "bytes", BCON_INT64(r->cloned_bytes),
                 "pacedMillis", BCON_INT64(r->paced_ms));
    if (SHL_FAILPOINT_FIRES(migrateThreadHangAtStep3)) {
        SHL_LOG_INFO(SHARDING, 4200302, "Hanging at a migration fail point", "failPoint",
                     BCON_UTF8("migrateThreadHangAtStep3"));
        shl_failpoint_pause_while_set(SHL_FAILPOINT(migrateThreadHangAtStep3), &r->cancel);
    }
    set_state(r, MIG_CATCHUP);
    bson_reinit(&cmd);
    BSON_APPEND_UTF8(&cmd, "_transferMods", r->ns);
    BSON_APPEND_UTF8(&cmd, "sessionId", r->session_id);
    for (;;) {
        bool commit;
        size_t n = 0, n_sessions = 0;
        if (abort_requested(r)) {
            SHL_FAIL(st, SHL_CODE_COMMAND_FAILED, "migration aborted");
        }
        pthread_mutex_lock(&r->s->mig_mu);
        commit = r->commit_requested;
        pthread_mutex_unlock(&r->s->mig_mu);
        if (commit) {
            set_state(r, MIG_COMMIT_START);
        }
        bson_destroy(&reply);
        SHL_ERR(shl_remote_run_shard(&r->s->remote, r->from, "admin", &cmd, &mig_remote_opts,
                                     &reply, st));
        SHL_ERR(apply_mods(r, &ns, &reply, &n, st));
        /* The history goes with the documents: once the donor commits, a retry may come
         * here. */
        SHL_ERR(transfer_session_mods(r, op, &n_sessions, st));
        pthread_mutex_lock(&r->s->mig_mu);
        if (r->state == MIG_CATCHUP || r->state == MIG_COMMIT_START) {
            r->catchup += (int64_t)n;
        } else {
            r->steady += (int64_t)n;
        }
        pthread_mutex_unlock(&r->s->mig_mu);
        if (n > 0 || n_sessions > 0) {
            continue;
        }
        if (commit) {
            break; /* the donor blocks writes: nothing more will come */
        }
        set_state(r, MIG_STEADY);
        SHL_ERR(mig_sleep(op, 10, st));
    }
    /* The donor commits the migration once we report done: from then on this shard owns
     * the documents, so they must survive a kill -9 here (the local writes were j:false). */
    SHL_ERR(shl_storage_wait_durable(r->s->svc->storage, shl_storage_clock_now(r->s->svc->storage),
                                     st));
    /* ... and, on a replica set, reach a majority of it (MongoDB's recipient waits for
     * majority before it reports done, whatever _secondaryThrottle says): a failover of
     * this shard after the donor commits must not lose the documents. */
    {
        uint64_t top = 0;
        SHL_ERR(shl_oplog_top(r->s->svc->storage, &top, st));
        SHL_ERR(shl_db_repl_wait_majority(r->s->svc, op, top, MIG_REMOTE_TIMEOUT_MS, st));
    }
    if (shl_opt_bool(SHL_OPT_migrationVerifyDigest)) {
        /* The range is complete here: its digest goes back with the commit reply. */
        mig_digest_t dg;
        int64_t start_us = shl_clock_mono_us();
        SHL_ERR(mig_range_digest(r->s, r->ns, &r->coll_uuid, r->key_pattern, r->min, r->max, &dg,
                                 st));
        SHL_LOG_INFO(SHARDING, 4200222, "Incoming migration range digest computed", "ns",
                     BCON_UTF8(r->ns), "count", BCON_INT64(dg.count), "durationMicros",
                     BCON_INT64(shl_clock_mono_us() - start_us));
        if (SHL_FAILPOINT_FIRES(migrationCorruptDigest)) {
            dg.sum ^= 1;
        }
        pthread_mutex_lock(&r->s->mig_mu);
        r->digest = dg;
        r->has_digest = true;
        pthread_mutex_unlock(&r->s->mig_mu);
    }
    set_state(r, MIG_DONE);
done:
    bson_destroy(&cmd);
    bson_destroy(&reply);
    return ret;
}

static void *
recipient_main(void *arg)
{
    shard_recipient_t *r = arg;
    shl_op_ctx_t op;
    shl_status_t st = SHL_STATUS_INIT;
    int ret;

    mig_internal_op(r->s, &op);
    ret = run_recipient(r, &op, &st);
    pthread_mutex_lock(&r->s->mig_mu);
    if (ret != 0) {
        r->state = r->abort_requested ? MIG_ABORT : MIG_FAIL;
        r->error = st;
        SHL_LOG_INFO(SHARDING, 4200301, "Incoming migration failed", "ns", BCON_UTF8(r->ns),
                     "error", BCON_UTF8(st.reason));
    }
    r->finished = true;
    pthread_cond_broadcast(&r->s->mig_cv);
    pthread_mutex_unlock(&r->s->mig_mu);
    return NULL;
}

/* ---------------------------------------------------------------- commands */

static int
get_req_doc(const bson_t *cmd, const char *ctx, const char *field, bson_t *out, shl_status_t *st)
{
    int ret = 0;
    bool found = false;

    SHL_ERR(shl_cmd_get_doc(cmd, field, out, &found, st));
    if (!found) {
        SHL_ERR(shl_idl_missing(ctx, field, st));
    }
done:
    return ret;
}

static int
get_req_str(const bson_t *cmd, const char *ctx, const char *field, const char **out,
            shl_status_t *st)
{
    int ret = 0;
    bool found = false;

    SHL_ERR(shl_cmd_get_string(cmd, field, out, &found, st));
    if (!found) {
        SHL_ERR(shl_idl_missing(ctx, field, st));
    }
done:
    return ret;
}

int
mig_recv_chunk_start(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    int ret = 0;
    shard_state_t *s = shard_state(op);
    const char *ctx = "_recvChunkStart", *ns = NULL, *sid = NULL, *from = NULL, *to = NULL;
    bson_t min, max, kp;
    bson_iter_t it;
    shard_recipient_t *r = NULL, *old = NULL;
    shl_uuid_t mid, cuuid;
    shl_ns_t parsed;
    bool locked = false;

    if (!bson_iter_init(&it, cmd) || !shl_iter_next(&it) || !BSON_ITER_HOLDS_UTF8(&it)) {
        SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH, "_recvChunkStart needs a namespace string");
    }
    ns = bson_iter_utf8(&it, NULL);
    SHL_ERR(shl_ns_parse(&parsed, ns, st));
    SHL_ERR(get_req_str(cmd, ctx, "sessionId", &sid, st));
    SHL_ERR(get_req_str(cmd, ctx, "fromShardName", &from, st));
    SHL_ERR(get_req_str(cmd, ctx, "toShardName", &to, st));
    SHL_ERR(get_req_doc(cmd, ctx, "min", &min, st));
    SHL_ERR(get_req_doc(cmd, ctx, "max", &max, st));
    SHL_ERR(get_req_doc(cmd, ctx, "shardKeyPattern", &kp, st));
    if (!bson_iter_init_find(&it, cmd, "migrationId")) {
        SHL_ERR(shl_idl_missing(ctx, "migrationId", st));
    }
    SHL_ERR(shl_idl_read_uuid(&it, ctx, &mid, st));
    if (!bson_iter_init_find(&it, cmd, "uuid")) {
        SHL_ERR(shl_idl_missing(ctx, "uuid", st));
    }
    SHL_ERR(shl_idl_read_uuid(&it, ctx, &cuuid, st));

    r = bson_malloc0(sizeof(*r));
    if (mig_throttle_parse(cmd, &r->throttle, &r->throttle_wc, st) != 0) {
        bson_free(r);
        r = NULL;
        ret = st->code;
        goto done;
    }
    atomic_init(&r->cancel, false);
    r->s = s;
    snprintf(r->ns, sizeof(r->ns), "%s", ns);
    snprintf(r->from, sizeof(r->from), "%s", from);
    snprintf(r->to, sizeof(r->to), "%s", to);
    snprintf(r->session_id, sizeof(r->session_id), "%s", sid);
    r->migration_id = mid;
    r->coll_uuid = cuuid;
    r->min = bson_copy(&min);
    r->max = bson_copy(&max);
    r->key_pattern = bson_copy(&kp);
    if (shl_shard_key_pattern_init(&r->pattern, &kp, st) != 0) {
        bson_destroy(r->key_pattern);
        r->key_pattern = NULL;
        ret = st->code;
        goto done;
    }
    pthread_mutex_lock(&s->mig_mu);
    locked = true;
    SHL_ERR(mig_check_idle_locked(s, st));
    old = s->recipient;
    s->recipient = r;
    if (pthread_create(&r->thread, NULL, recipient_main, r) != 0) {
        s->recipient = old;
        old = NULL;
        SHL_FAIL(st, SHL_CODE_INTERNAL_ERROR, "could not start the migration thread");
    }
    r = NULL;
    BSON_APPEND_BOOL(reply, "started", true);
done:
    if (locked) {
        pthread_mutex_unlock(&s->mig_mu);
    }
    if (old != NULL) {
        pthread_join(old->thread, NULL); /* finished: returns at once */
        recipient_free(old);
    }
    if (r != NULL) {
        recipient_free(r);
    }
    return ret;
}

static void
append_status(const shard_recipient_t *r, bson_t *reply)
{
    bson_t counts;

    BSON_APPEND_BOOL(reply, "waited", true);
    BSON_APPEND_BOOL(reply, "active", !r->finished);
    BSON_APPEND_UTF8(reply, "sessionId", r->session_id);
    BSON_APPEND_UTF8(reply, "ns", r->ns);
    BSON_APPEND_UTF8(reply, "fromShardId", r->from);
    BSON_APPEND_DOCUMENT(reply, "min", r->min);
    BSON_APPEND_DOCUMENT(reply, "max", r->max);
    BSON_APPEND_DOCUMENT(reply, "shardKeyPattern", r->key_pattern);
    shl_uuid_append(reply, "migrationId", &r->migration_id);
    BSON_APPEND_UTF8(reply, "state", state_names[r->state]);
    if (r->state == MIG_FAIL || r->state == MIG_ABORT) {
        BSON_APPEND_UTF8(reply, "errmsg", r->error.reason);
    }
    BSON_APPEND_DOCUMENT_BEGIN(reply, "counts", &counts);
    BSON_APPEND_INT64(&counts, "cloned", r->cloned);
    BSON_APPEND_INT64(&counts, "clonedBytes", r->cloned_bytes);
    BSON_APPEND_INT64(&counts, "catchup", r->catchup);
    BSON_APPEND_INT64(&counts, "steady", r->steady);
    bson_append_document_end(reply, &counts);
}

/* The recipient whose session is cmd's sessionId (mig_mu held), or NULL. */
static shard_recipient_t *
recipient_for(shard_state_t *s, const bson_t *cmd)
{
    const char *sid = NULL;
    bool found = false;
    shl_status_t st = SHL_STATUS_INIT;

    if (s->recipient == NULL) {
        return NULL;
    }
    if (shl_cmd_get_string(cmd, "sessionId", &sid, &found, &st) != 0 || !found) {
        return s->recipient;
    }
    return strcmp(s->recipient->session_id, sid) == 0 ? s->recipient : NULL;
}

int
mig_recv_chunk_status(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    shard_state_t *s = shard_state(op);
    shard_recipient_t *r;

    (void)st;
    pthread_mutex_lock(&s->mig_mu);
    r = recipient_for(s, cmd);
    if (r != NULL) {
        append_status(r, reply);
    } else {
        BSON_APPEND_BOOL(reply, "waited", true);
        BSON_APPEND_BOOL(reply, "active", false);
        BSON_APPEND_UTF8(reply, "state", "ready");
    }
    pthread_mutex_unlock(&s->mig_mu);
    return 0;
}

/* Wait (mig_mu held) until r's thread has finished. */
static int
wait_finished_locked(shard_state_t *s, shl_op_ctx_t *op, shard_recipient_t *r, shl_status_t *st)
{
    int ret = 0;

    while (!r->finished) {
        pthread_mutex_unlock(&s->mig_mu);
        ret = mig_sleep(op, 10, st);
        pthread_mutex_lock(&s->mig_mu);
        if (ret != 0) {
            break;
        }
    }
    return ret;
}

/* The reason of the recipient's persisted critical section (config.collection_critical_sections). */
#define RECV_CRIT_COMMAND "moveChunk"

/*
 * The recipient's critical section (MongoDB 6.0+): from its _recvChunkCommit until the
 * donor's _recvChunkReleaseCritSec (after the commit) or _recvChunkAbort, versioned reads and
 * writes of 'ns' wait on this shard, so no router reads the range this shard has just
 * received before its routing says this shard owns it. Persisted first, with the reason
 * {command: "moveChunk", ns, sessionId}, so a restart keeps it (shard_crit_sections_reload)
 * until the donor -- or its recovery -- releases it. Idempotent.
 */
static int
recipient_crit_enter(shard_state_t *s, shl_op_ctx_t *op, const char *ns, const char *sid,
                     shl_status_t *st)
{
    const char *names[1] = {ns};
    bson_t reason = BSON_INITIALIZER;
    int ret = 0;

    BSON_APPEND_UTF8(&reason, "command", RECV_CRIT_COMMAND);
    BSON_APPEND_UTF8(&reason, "ns", ns);
    BSON_APPEND_UTF8(&reason, "sessionId", sid);
    SHL_ERR(shard_critical_section_persist(s, names, 1, &reason, true, st));
    SHL_ERR(shard_crit_enter(s, op, ns, SHARD_CRIT_ALL, st));
done:
    bson_destroy(&reason);
    return ret;
}

/* Whether a migration's critical section of 'ns' is persisted here (not a DDL's). */
static int
recipient_crit_held(shard_state_t *s, const char *ns, bool *held, shl_status_t *st)
{
    bson_t *cmd = BCON_NEW("find", BCON_UTF8("collection_critical_sections"), "filter", "{",
                           "_id", BCON_UTF8(ns), "reason.command", BCON_UTF8(RECV_CRIT_COMMAND),
                           "}");
    bson_t reply = BSON_INITIALIZER, *docs = NULL;
    int ret = 0;

    *held = false;
    bson_destroy(&reply);
    SHL_ERR(shl_remote_run_self(&s->remote, "config", cmd, NULL, &reply, st));
    *held = mig_cursor_docs(&reply, &docs) > 0;
done:
    bson_free(docs);
    bson_destroy(&reply);
    bson_destroy(cmd);
    return ret;
}

/* Leave the recipient's critical section of 'ns' if a migration holds it: refresh the
 * filtering metadata first (the commit is on the config server by now, or the migration
 * was aborted), then remove the document and let the waiting requests go on -- they check
 * their version against the new metadata. Idempotent. Errors: the refresh's (the donor
 * sends again). */
static int
recipient_crit_release(shard_state_t *s, const char *ns, shl_status_t *st)
{
    const char *names[1] = {ns};
    bool held = false;
    int ret = 0;

    SHL_ERR(recipient_crit_held(s, ns, &held, st));
    if (!held) {
        goto done;
    }
    SHL_ERR(shard_meta_refresh(s, ns, NULL, st));
    SHL_ERR(shard_critical_section_persist(s, names, 1, NULL, false, st));
    shard_crit_exit(s, ns);
    SHL_LOG_INFO(SHARDING, 4200231, "recipient left its critical section", "ns", BCON_UTF8(ns));
done:
    return ret;
}

/* The namespace a _recvChunk* command names (its first value). */
static const char *
recv_ns(const bson_t *cmd)
{
    bson_iter_t it;

    if (bson_iter_init(&it, cmd) && bson_iter_next(&it) && BSON_ITER_HOLDS_UTF8(&it)) {
        return bson_iter_utf8(&it, NULL);
    }
    return NULL;
}

int
mig_recv_chunk_commit(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    int ret = 0;
    shard_state_t *s = shard_state(op);
    shard_recipient_t *r;
    char ns[SHL_NS_MAX + 1], sid[sizeof(r->session_id)];
    bool locked = true;

    pthread_mutex_lock(&s->mig_mu);
    r = recipient_for(s, cmd);
    if (r == NULL) {
        SHL_FAIL(st, SHL_CODE_ILLEGAL_OPERATION,
                 "_recvChunkCommit failed: no incoming migration with this session");
    }
    r->commit_requested = true;
    SHL_ERR(wait_finished_locked(s, op, r, st));
    append_status(r, reply);
    if (r->state != MIG_DONE) {
        SHL_FAIL(st, SHL_CODE_OPERATION_FAILED, "_recvChunkCommit failed: %s", r->error.reason);
    }
    if (r->has_digest) {
        mig_digest_append(reply, MIG_DIGEST_FIELD, &r->digest);
    }
    snprintf(ns, sizeof(ns), "%s", r->ns);
    snprintf(sid, sizeof(sid), "%s", r->session_id);
    pthread_mutex_unlock(&s->mig_mu);
    locked = false;
    SHL_ERR(recipient_crit_enter(s, op, ns, sid, st));
done:
    if (locked) {
        pthread_mutex_unlock(&s->mig_mu);
    }
    return ret;
}

/* _recvChunkReleaseCritSec: <ns>, sessionId -- the donor committed (and refreshed): leave
 * the critical section _recvChunkCommit entered. */
int
mig_recv_chunk_release_crit(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply,
                            shl_status_t *st)
{
    int ret = 0;
    const char *ns = recv_ns(cmd);

    (void)reply;
    if (ns == NULL) {
        SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH, "_recvChunkReleaseCritSec needs a namespace string");
    }
    SHL_ERR(recipient_crit_release(shard_state(op), ns, st));
done:
    return ret;
}

int
mig_recv_chunk_abort(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    int ret = 0;
    shard_state_t *s = shard_state(op);
    shard_recipient_t *r;
    bson_iter_t it;
    shl_uuid_t mid;
    bool has_mid = false;

    (void)reply;
    if (bson_iter_init_find(&it, cmd, "migrationId")) {
        SHL_ERR(shl_idl_read_uuid(&it, "_recvChunkAbort", &mid, st));
        has_mid = true;
    }
    pthread_mutex_lock(&s->mig_mu);
    r = recipient_for(s, cmd);
    if (r != NULL && (!has_mid || shl_uuid_eq(&r->migration_id, &mid))) {
        r->abort_requested = true;
        atomic_store(&r->cancel, true);
        ret = wait_finished_locked(s, op, r, st);
        if (!has_mid) {
            mid = r->migration_id;
            has_mid = true;
        }
    }
    pthread_mutex_unlock(&s->mig_mu);
    SHL_ERR(ret);
    if (has_mid) {
        /* What was copied is this shard's orphans: numOrphanDocs counts them. */
        ret = mig_mark_task_ready_counted(s, op, &mid, st);
        if (ret == SHL_CODE_NO_SUCH_KEY) {
            shl_status_clear(st);
            ret = 0;
        }
        SHL_ERR(ret);
    }
    /* An abort after _recvChunkCommit (the config server refused the commit): the range
     * stays the donor's, this shard's metadata did not change. */
    if (recv_ns(cmd) != NULL) {
        SHL_ERR(recipient_crit_release(s, recv_ns(cmd), st));
    }
done:
    return ret;
}

void
shard_recipient_shutdown(shard_state_t *s)
{
    shard_recipient_t *r;

    pthread_mutex_lock(&s->mig_mu);
    r = s->recipient;
    s->recipient = NULL;
    if (r != NULL) {
        r->abort_requested = true;
        atomic_store(&r->cancel, true);
    }
    pthread_mutex_unlock(&s->mig_mu);
    if (r != NULL) {
        pthread_join(r->thread, NULL);
        recipient_free(r);
    }
}
