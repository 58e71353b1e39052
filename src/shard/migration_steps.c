/*
 * migration_steps.c -- the donor's side of the chunk migration protocol on the outgoing-command
 * interface (sharding/remote.h): the coordinator's document (MongoDB's
 * MigrationCoordinatorDocument) and every command the donor sends -- _recvChunkStart,
 * _recvChunkStatus, _recvChunkCommit, _configsvrCommitChunkMigration and the decision asked
 * of the config server, the recipient's part of the commit and abort sequences. No storage
 * and no shard state: migration_source.c's phases call these with their coordinator's remote,
 * the unit tests with the fake one (migration_steps_test.c).
 */
#include <string.h>

#include "base/failpoint.h"
#include "bson/bson_iter.h"
#include "bson/bson_util.h"
#include "net/command_args.h"
#include "shard/migration_private.h"
#include "sharding/coordinator.h"

SHL_FAILPOINT_DEFINE(migrationCommitNetworkError)
SHL_FAILPOINT_DEFINE(failMigrationCommit)
SHL_FAILPOINT_DEFINE(migrationDecisionQueryError)

const shl_remote_options_t mig_remote_opts = {.timeout_ms = MIG_REMOTE_TIMEOUT_MS};

/* ---------------------------------------------------------------- the document */

void
mig_coord_cleanup(mig_coord_t *c)
{
    if (c->min != NULL) {
        bson_destroy(c->min);
    }
    if (c->max != NULL) {
        bson_destroy(c->max);
    }
    c->min = c->max = NULL;
}

void
mig_coord_to_bson(const mig_coord_t *c, bson_t *out)
{
    bson_t r, lsid;

    bson_init(out);
    shl_uuid_append(out, "_id", &c->id);
    BSON_APPEND_UTF8(out, "migrationSessionId", c->session_id);
    BSON_APPEND_DOCUMENT_BEGIN(out, "lsid", &lsid);
    shl_uuid_append(&lsid, "id", &c->id);
    bson_append_document_end(out, &lsid);
    BSON_APPEND_INT64(out, "txnNumber", 0);
    BSON_APPEND_UTF8(out, "nss", c->ns);
    shl_uuid_append(out, "collectionUuid", &c->coll_uuid);
    BSON_APPEND_UTF8(out, "donorShardId", c->donor);
    BSON_APPEND_UTF8(out, "recipientShardId", c->recipient);
    BSON_APPEND_DOCUMENT_BEGIN(out, "range", &r);
    BSON_APPEND_DOCUMENT(&r, "min", c->min);
    BSON_APPEND_DOCUMENT(&r, "max", c->max);
    bson_append_document_end(out, &r);
    shl_chunk_version_append(out, "preMigrationChunkVersion", &c->pre_version);
    if (c->decision != 0) {
        BSON_APPEND_UTF8(out, "decision", c->decision > 0 ? "committed" : "aborted");
    }
}

int
mig_coord_parse(const bson_t *doc, mig_coord_t *c, shl_status_t *st)
{
    int ret = 0;
    bson_iter_t it;
    const char *ctx = "MigrationCoordinatorDocument";

    memset(c, 0, sizeof(*c));
    if (!bson_iter_init(&it, doc)) {
        SHL_FAIL(st, SHL_CODE_BAD_VALUE, "corrupt migration coordinator document");
    }
    while (shl_iter_next(&it)) {
        const char *k = shl_iter_key(&it);
        if (strcmp(k, "_id") == 0) {
            SHL_ERR(shl_idl_read_uuid(&it, ctx, &c->id, st));
        } else if (strcmp(k, "collectionUuid") == 0) {
            SHL_ERR(shl_idl_read_uuid(&it, ctx, &c->coll_uuid, st));
        } else if (strcmp(k, "nss") == 0 && BSON_ITER_HOLDS_UTF8(&it)) {
            snprintf(c->ns, sizeof(c->ns), "%s", bson_iter_utf8(&it, NULL));
        } else if (strcmp(k, "migrationSessionId") == 0 && BSON_ITER_HOLDS_UTF8(&it)) {
            snprintf(c->session_id, sizeof(c->session_id), "%s", bson_iter_utf8(&it, NULL));
        } else if (strcmp(k, "donorShardId") == 0 && BSON_ITER_HOLDS_UTF8(&it)) {
            snprintf(c->donor, sizeof(c->donor), "%s", bson_iter_utf8(&it, NULL));
        } else if (strcmp(k, "recipientShardId") == 0 && BSON_ITER_HOLDS_UTF8(&it)) {
            snprintf(c->recipient, sizeof(c->recipient), "%s", bson_iter_utf8(&it, NULL));
        } else if (strcmp(k, "decision") == 0 && BSON_ITER_HOLDS_UTF8(&it)) {
            c->decision = strcmp(bson_iter_utf8(&it, NULL), "committed") == 0 ? 1 : -1;
        } else if (strcmp(k, "range") == 0) {
            bson_t r, v;
            bson_iter_t ri;
            SHL_ERR(shl_idl_read_doc(&it, ctx, &r, st));
            if (bson_iter_init_find(&ri, &r, "min")) {
                SHL_ERR(shl_idl_read_doc(&ri, ctx, &v, st));
                c->min = bson_copy(&v);
            }
            if (bson_iter_init_find(&ri, &r, "max")) {
                SHL_ERR(shl_idl_read_doc(&ri, ctx, &v, st));
                c->max = bson_copy(&v);
            }
        }
    }
    if (c->min == NULL || c->max == NULL) {
        SHL_ERR(shl_idl_missing(ctx, "range", st));
    }
done:
    if (ret != 0) {
        mig_coord_cleanup(c);
    }
    return ret;
}

/* ---------------------------------------------------------------- to the recipient */

/* Run 'cmd' on the recipient's database 'db'; the reply is dropped unless 'reply' is given
 * (then initialised by the callee). */
static int
to_recipient(const shl_remote_t *r, const mig_coord_t *c, const char *db, const bson_t *cmd,
             bson_t *reply, shl_status_t *st)
{
    shl_remote_target_t t = shl_remote_target_shard(c->recipient);
    bson_t tmp;
    int ret = shl_remote_run(r, &t, db, cmd, &mig_remote_opts, reply != NULL ? reply : &tmp, st);

    if (reply == NULL) {
        bson_destroy(&tmp);
    }
    return ret;
}

int
mig_send_recv_chunk_start(const shl_remote_t *r, const mig_coord_t *c, const bson_t *pattern,
                          const bson_t *req, shl_status_t *st)
{
    int ret;
    bson_t cmd = BSON_INITIALIZER, lsid;

    BSON_APPEND_UTF8(&cmd, "_recvChunkStart", c->ns);
    shl_uuid_append(&cmd, "uuid", &c->coll_uuid);
    shl_uuid_append(&cmd, "migrationId", &c->id);
    BSON_APPEND_DOCUMENT_BEGIN(&cmd, "lsid", &lsid);
    shl_uuid_append(&lsid, "id", &c->id);
    bson_append_document_end(&cmd, &lsid);
    BSON_APPEND_INT64(&cmd, "txnNumber", 0);
    BSON_APPEND_UTF8(&cmd, "sessionId", c->session_id);
    BSON_APPEND_UTF8(&cmd, "fromShardName", c->donor);
    BSON_APPEND_UTF8(&cmd, "toShardName", c->recipient);
    BSON_APPEND_DOCUMENT(&cmd, "min", c->min);
    BSON_APPEND_DOCUMENT(&cmd, "max", c->max);
    BSON_APPEND_DOCUMENT(&cmd, "shardKeyPattern", pattern);
    if (req != NULL) {
        mig_throttle_copy(req, &cmd);
    }
    ret = to_recipient(r, c, "admin", &cmd, NULL, st);
    bson_destroy(&cmd);
    return ret;
}

int
mig_poll_recipient(const shl_remote_t *r, const mig_coord_t *c, bool *steady, shl_status_t *st)
{
    int ret = 0;
    bson_t cmd = BSON_INITIALIZER, reply;
    bson_iter_t it;
    const char *state = "";

    *steady = false;
    BSON_APPEND_UTF8(&cmd, "_recvChunkStatus", c->ns);
    BSON_APPEND_UTF8(&cmd, "sessionId", c->session_id);
    ret = to_recipient(r, c, "admin", &cmd, &reply, st);
    if (ret == 0 && bson_iter_init_find(&it, &reply, "state") && BSON_ITER_HOLDS_UTF8(&it)) {
        state = bson_iter_utf8(&it, NULL);
    }
    *steady = ret == 0 && strcmp(state, "steady") == 0;
    if (ret == 0 &&
        (strcmp(state, "fail") == 0 || strcmp(state, "abort") == 0 || strcmp(state, "done") == 0)) {
        const char *msg = "";
        if (bson_iter_init_find(&it, &reply, "errmsg") && BSON_ITER_HOLDS_UTF8(&it)) {
            msg = bson_iter_utf8(&it, NULL);
        }
        ret = shl_status_set(
            st, SHL_CODE_OPERATION_FAILED,
            "Data transfer error: migration destination shard %s reported state %s: %s",
            c->recipient, state, msg);
    }
    bson_destroy(&reply);
    bson_destroy(&cmd);
    return ret;
}

int
mig_wait_steady(const shl_remote_t *r, const mig_coord_t *c, mig_poll_check_fn check, void *arg,
                shl_status_t *st)
{
    int ret = 0;
    bool steady = false;

    for (int polls = 0; !steady; polls++) {
        SHL_ERR(check(arg, polls, st));
        SHL_ERR(mig_poll_recipient(r, c, &steady, st));
    }
done:
    return ret;
}

int
mig_send_recv_chunk_commit(const shl_remote_t *r, const mig_coord_t *c, bson_t *reply,
                           shl_status_t *st)
{
    bson_t cmd = BSON_INITIALIZER;
    int ret;

    BSON_APPEND_UTF8(&cmd, "_recvChunkCommit", c->ns);
    BSON_APPEND_UTF8(&cmd, "sessionId", c->session_id);
    ret = to_recipient(r, c, "admin", &cmd, reply, st);
    bson_destroy(&cmd);
    return ret;
}

int
mig_recipient_finish(const shl_remote_t *r, const mig_coord_t *c, shl_status_t *st)
{
    int ret = 0;
    bson_t cmd = BSON_INITIALIZER;

    if (c->decision > 0) {
        bson_t arr, d, q;
        /* The recipient may serve the range now: it refreshes and leaves its critical
         * section (entered at _recvChunkCommit). */
        BSON_APPEND_UTF8(&cmd, "_recvChunkReleaseCritSec", c->ns);
        BSON_APPEND_UTF8(&cmd, "sessionId", c->session_id);
        SHL_ERR(to_recipient(r, c, "admin", &cmd, NULL, st));
        /* Its task goes: a delete of its config.rangeDeletions document, as MongoDB's donor
         * sends. */
        bson_reinit(&cmd);
        BSON_APPEND_UTF8(&cmd, "delete", "rangeDeletions");
        BSON_APPEND_ARRAY_BEGIN(&cmd, "deletes", &arr);
        BSON_APPEND_DOCUMENT_BEGIN(&arr, "0", &d);
        BSON_APPEND_DOCUMENT_BEGIN(&d, "q", &q);
        shl_uuid_append(&q, "_id", &c->id);
        bson_append_document_end(&d, &q);
        BSON_APPEND_INT32(&d, "limit", 1);
        bson_append_document_end(&arr, &d);
        bson_append_array_end(&cmd, &arr);
        SHL_ERR(to_recipient(r, c, "config", &cmd, NULL, st));
    } else {
        BSON_APPEND_UTF8(&cmd, "_recvChunkAbort", c->ns);
        shl_uuid_append(&cmd, "migrationId", &c->id);
        BSON_APPEND_UTF8(&cmd, "sessionId", c->session_id);
        SHL_ERR(to_recipient(r, c, "admin", &cmd, NULL, st));
    }
done:
    bson_destroy(&cmd);
    return ret;
}

/* ---------------------------------------------------------------- to the config server */

int
mig_ask_decision(const shl_remote_t *r, const mig_coord_t *c, bool *committed, shl_status_t *st)
{
    int ret = 0;
    shl_remote_target_t cfg = shl_remote_target_config();
    bson_t cmd = BSON_INITIALIZER, reply = BSON_INITIALIZER, filter, rc, *docs = NULL;
    bson_iter_t it;
    size_t n = 0;

    *committed = false;
    BSON_APPEND_UTF8(&cmd, "find", "chunks");
    BSON_APPEND_DOCUMENT_BEGIN(&cmd, "filter", &filter);
    shl_uuid_append(&filter, "uuid", &c->coll_uuid);
    BSON_APPEND_DOCUMENT(&filter, "min", c->min);
    bson_append_document_end(&cmd, &filter);
    BSON_APPEND_DOCUMENT_BEGIN(&cmd, "readConcern", &rc);
    BSON_APPEND_UTF8(&rc, "level", "majority");
    bson_append_document_end(&cmd, &rc);
    bson_destroy(&reply);
    if (SHL_FAILPOINT_FIRES(migrationDecisionQueryError)) {
        SHL_FAIL(st, SHL_CODE_HOST_UNREACHABLE,
                 "Network error from failpoint migrationDecisionQueryError");
    }
    SHL_ERR(shl_remote_run(r, &cfg, "config", &cmd, &mig_remote_opts, &reply, st));
    n = mig_cursor_docs(&reply, &docs);
    if (n > 0 && bson_iter_init_find(&it, &docs[0], "shard") && BSON_ITER_HOLDS_UTF8(&it)) {
        *committed = strcmp(bson_iter_utf8(&it, NULL), c->recipient) == 0;
    }
done:
    bson_free(docs);
    bson_destroy(&cmd);
    bson_destroy(&reply);
    return ret;
}

static int
send_commit(const shl_remote_t *r, const mig_coord_t *c, const mig_commit_args_t *a,
            shl_status_t *st)
{
    int ret = 0;
    shl_remote_target_t cfg = shl_remote_target_config();
    shl_remote_options_t opts = mig_remote_opts;
    bson_t cmd = BSON_INITIALIZER, reply = BSON_INITIALIZER, chunk;

    if (SHL_FAILPOINT_FIRES(failMigrationCommit)) {
        SHL_FAIL(st, SHL_CODE_OPERATION_FAILED,
                 "Failing _configsvrCommitChunkMigration (failMigrationCommit)");
    }
    BSON_APPEND_UTF8(&cmd, "_configsvrCommitChunkMigration", c->ns);
    BSON_APPEND_UTF8(&cmd, "fromShard", c->donor);
    BSON_APPEND_UTF8(&cmd, "toShard", c->recipient);
    BSON_APPEND_DOCUMENT_BEGIN(&cmd, "migratedChunk", &chunk);
    BSON_APPEND_DOCUMENT(&chunk, "min", c->min);
    BSON_APPEND_DOCUMENT(&chunk, "max", c->max);
    BSON_APPEND_TIMESTAMP(&chunk, "lastmod", a->chunk_version.major, a->chunk_version.minor);
    bson_append_document_end(&cmd, &chunk);
    shl_chunk_version_append(&cmd, "fromShardCollectionVersion", &a->coll_version);
    if (a->valid_after != 0) {
        bson_append_timestamp(&cmd, "validAfter", -1, (uint32_t)(a->valid_after >> 32),
                              (uint32_t)(a->valid_after & 0xffffffffu));
    }
    if (a->digest != NULL) {
        mig_digest_append(&cmd, MIG_DIGEST_FIELD, a->digest);
    }
    opts.w = "majority";
    bson_destroy(&reply);
    SHL_ERR(shl_remote_run(r, &cfg, "admin", &cmd, &opts, &reply, st));
    if (SHL_FAILPOINT_FIRES(migrationCommitNetworkError)) {
        /* The commit happened but its reply is lost: the outcome is unknown here. */
        SHL_FAIL(st, SHL_CODE_HOST_UNREACHABLE,
                 "Network error from failpoint migrationCommitNetworkError");
    }
done:
    bson_destroy(&reply);
    bson_destroy(&cmd);
    return ret;
}

int
mig_commit_on_config(const shl_remote_t *r, const mig_coord_t *c, const mig_commit_args_t *a,
                     shl_status_t *st)
{
    int decision = 1;
    bool committed = false;

    int ret = send_commit(r, c, a, st);

    if (ret != 0) {
        shl_status_t why = *st;
        why.code = ret;
        /* Did the commit happen? Ask the authority before deciding. */
        shl_status_clear(st);
        if (mig_ask_decision(r, c, &committed, st) != 0) {
            decision = 0;
        } else {
            decision = committed ? 1 : -1;
        }
        *st = committed ? (shl_status_t)SHL_STATUS_INIT : why;
    }
    return decision;
}

/* ---------------------------------------------------------------- remote-only phases */

void
mig_coord_set_decision(shl_coord_t *c, mig_coord_t *mc, int decision)
{
    bson_t doc;

    mc->decision = decision;
    mig_coord_to_bson(mc, &doc);
    shl_coord_doc_set(c, &doc);
    bson_destroy(&doc);
}

int
mig_phase_resolve_decision(shl_coord_t *c, shl_status_t *st)
{
    mig_coord_t mc;
    bool committed = false;
    int ret = 0;

    memset(&mc, 0, sizeof(mc));
    if (bson_has_field(shl_coord_doc(c), "decision")) {
        goto done;
    }
    SHL_ERR(mig_coord_parse(shl_coord_doc(c), &mc, st));
    SHL_ERR(mig_ask_decision(shl_coord_remote(c), &mc, &committed, st));
    mig_coord_set_decision(c, &mc, committed ? 1 : -1);
done:
    mig_coord_cleanup(&mc);
    return ret;
}
