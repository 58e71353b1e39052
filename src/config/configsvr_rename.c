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
 * a crash or a failure leaves the document for the recovery thread, which runs it again. A
 * retry of a running rename joins it (MongoDB's DDL coordinators): see "running renames".
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

/* ---------------------------------------------------------------- running renames */

/*
 * Hold at a hang fail point until it is switched off or the rename's driver is told to
 * stop: a request's operation when it is killed (killOp, or the shutdown, which kills every
 * operation still running after its grace period -- waiting for the recovery thread's stop
 * flag instead kept the request running past the shutdown, into closed storage); the
 * recovery thread (op NULL) when it is stopped. 0, or the operation's interruption.
 */
static int
rename_pause(shl_failpoint_t *fp, shl_op_ctx_t *op, shl_status_t *st)
{
    int ret = 0;

    shl_failpoint_pause_while_set(fp, op != NULL ? &op->killed : &rec_stop);
    if (op != NULL) {
        ret = shl_op_check_interrupt(op, st);
    }
    return ret;
}

/*
 * One record per source namespace whose rename is running, so that a retry of the same
 * request joins it (MongoDB's DDL coordinators: the retry waits for the running coordinator
 * and gets its result) and a request with other arguments fails fast with
 * ConflictingOperationInProgress instead of queueing behind the namespace locks. A record is
 * 'driven' while a request or the recovery thread works on it; a request that failed past the
 * point of no return leaves it undriven and the recovery thread takes it over; it ends, with
 * the rename's result, once the coordinator document is gone (or the request failed before
 * writing one). Guarded by coord_mu; freed when unlinked and no waiter holds it.
 */
typedef struct coord {
    rename_req_t r; /* from, to, drop_target: what a retry must match */
    bool driven, done, linked;
    int refs;        /* requests waiting on it, plus its driver */
    int code;        /* the result once done */
    shl_status_t st; /* likewise */
    struct coord *next;
} coord_t;

static pthread_mutex_t coord_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t coord_cv = PTHREAD_COND_INITIALIZER;
static coord_t *coords; /* guarded by coord_mu */

static bool
same_args(const rename_req_t *a, const rename_req_t *b)
{
    return strcmp(a->from.full, b->from.full) == 0 && strcmp(a->to.full, b->to.full) == 0 &&
           a->drop_target == b->drop_target;
}

/* The record of 'from', or NULL. The caller holds coord_mu. */
static coord_t *
coord_find(const char *from)
{
    coord_t *c = coords;

    while (c != NULL && strcmp(c->r.from.full, from) != 0) {
        c = c->next;
    }
    return c;
}

static void
coord_unlink(coord_t *c)
{
    coord_t **p = &coords;

    while (*p != c) {
        p = &(*p)->next;
    }
    *p = c->next;
    c->linked = false;
}

/* Drop one reference; the caller holds coord_mu. */
static void
coord_put(coord_t *c)
{
    c->refs--;
    if (c->refs == 0 && !c->linked) {
        bson_free(c);
    }
}

/* ConflictingOperationInProgress: 'r' names the source of the running rename 'running'. */
static int
conflict(const rename_req_t *running, const rename_req_t *r, shl_status_t *st)
{
    return shl_status_set(
        st, SHL_CODE_CONFLICTING_OPERATION_IN_PROGRESS,
        "Another renameCollection of %s is already running with different arguments "
        "(to: %s, dropTarget: %s); this request has to: %s, dropTarget: %s",
        running->from.full, running->to.full, running->drop_target ? "true" : "false", r->to.full,
        r->drop_target ? "true" : "false");
}

/*
 * A request's claim on r->from: a new record it drives (*joined false), or the running
 * record with the same arguments, to wait for (*joined true). Either way the caller holds a
 * reference (coord_end or coord_wait drops it). Errors: ConflictingOperationInProgress when
 * the running one has other arguments.
 */
static int
coord_claim(const rename_req_t *r, coord_t **out, bool *joined, shl_status_t *st)
{
    int ret = 0;
    coord_t *c = NULL;
    bool kick = false;

    *out = NULL;
    *joined = false;
    pthread_mutex_lock(&coord_mu);
    c = coord_find(r->from.full);
    if (c != NULL && !same_args(&c->r, r)) {
        ret = conflict(&c->r, r, st);
    } else if (c != NULL) {
        kick = !c->driven; /* the recovery thread finishes it */
        c->refs++;
        *joined = true;
        *out = c;
    } else {
        c = bson_malloc0(sizeof(*c));
        c->r = *r;
        c->driven = true;
        c->linked = true;
        c->refs = 1;
        c->next = coords;
        coords = c;
        *out = c;
    }
    pthread_mutex_unlock(&coord_mu);
    if (kick) {
        cfg_rename_recover_start();
    }
    return ret;
}

/*
 * The recovery thread's claim on a pending rename: the record (created if none) becomes
 * driven by it and it holds a reference. False, and nothing held, when a request drives it
 * now (the thread comes back to it later).
 */
static bool
coord_adopt(const rename_req_t *r, coord_t **out)
{
    coord_t *c = NULL;
    bool ok = false;

    *out = NULL;
    pthread_mutex_lock(&coord_mu);
    c = coord_find(r->from.full);
    if (c == NULL) {
        c = bson_malloc0(sizeof(*c));
        c->r = *r;
        c->linked = true;
        c->next = coords;
        coords = c;
    }
    if (!c->driven) {
        c->driven = true;
        c->refs++;
        *out = c;
        ok = true;
    }
    pthread_mutex_unlock(&coord_mu);
    return ok;
}

/*
 * The driver lets go of its record: with 'pending' (its coordinator document is left for
 * the recovery thread) the record stays, undriven, for the waiters; otherwise the rename is
 * over and every waiter gets 'code'/'st'. Drops the driver's reference.
 */
static void
coord_end(coord_t *c, int code, const shl_status_t *st, bool pending)
{
    pthread_mutex_lock(&coord_mu);
    c->driven = false;
    if (!pending) {
        c->done = true;
        c->code = code;
        if (code != 0) {
            c->st = *st;
        }
        coord_unlink(c);
        pthread_cond_broadcast(&coord_cv);
    }
    coord_put(c);
    pthread_mutex_unlock(&coord_mu);
}

/* Wait for the rename of 'c' to end and return its result; drops the caller's reference.
 * Errors: the rename's, or the request's interruption (maxTimeMS, killOp, shutdown). */
static int
coord_wait(shl_op_ctx_t *op, coord_t *c, shl_status_t *st)
{
    int ret = 0;

    pthread_mutex_lock(&coord_mu);
    while (!c->done && ret == 0) {
        if (atomic_load(&rec_stop)) {
            ret = shl_status_set(st, SHL_CODE_INTERRUPTED_AT_SHUTDOWN,
                                 "interrupted at shutdown while waiting for the rename of %s",
                                 c->r.from.full);
            break;
        }
        if (op != NULL && shl_op_check_interrupt(op, st) != 0) {
            ret = st->code;
            break;
        }
        shl_cond_timedwait_ms(&coord_cv, &coord_mu, 100);
    }
    if (ret == 0 && c->code != 0) {
        *st = c->st;
        ret = c->code;
    }
    coord_put(c);
    pthread_mutex_unlock(&coord_mu);
    return ret;
}

/* The sources of the undriven records (a request failed past the start): the recovery
 * thread visits them even when their document is gone, to end them. Caller frees. */
static size_t
coord_undriven(rename_req_t **out)
{
    size_t n = 0;

    pthread_mutex_lock(&coord_mu);
    for (coord_t *c = coords; c != NULL; c = c->next) {
        n += c->driven ? 0 : 1;
    }
    *out = bson_malloc0((n + 1) * sizeof(**out));
    n = 0;
    for (coord_t *c = coords; c != NULL; c = c->next) {
        if (!c->driven) {
            (*out)[n++] = c->r;
        }
    }
    pthread_mutex_unlock(&coord_mu);
    return n;
}

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
        SHL_ERR(rename_pause(SHL_FAILPOINT(hangRenameCollectionBeforeCommit), op, st));
    }
    if (r->sharded) {
        SHL_ERR(commit_metadata(op, r, st));
    }
    if (SHL_FAILPOINT_FIRES(hangRenameCollectionBeforeUnblock)) {
        SHL_ERR(rename_pause(SHL_FAILPOINT(hangRenameCollectionBeforeUnblock), op, st));
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

/*
 * Finish the coordinator documents that name req's source or target; the caller holds both
 * locks (a document naming them was written under the same locks). The document of this very
 * rename (same source, target and dropTarget: a retry of a request whose first run did not
 * answer, e.g. across a config server restart) is run to its end with *adopted set: its
 * result is the request's. Errors: ConflictingOperationInProgress for a rename of the same
 * source with other arguments, or one that names only one of the two; run_locked's.
 */
static int
finish_pending(shl_op_ctx_t *op, const rename_req_t *req, bool *adopted, shl_status_t *st)
{
    int ret = 0;
    cfg_docs_t d = {0};
    const char *a = req->from.full, *b = req->to.full;
    bson_t *q =
        BCON_NEW("$or", "[", "{", "_id", "{", "$in", "[", BCON_UTF8(a), BCON_UTF8(b), "]", "}", "}",
                 "{", "to", "{", "$in", "[", BCON_UTF8(a), BCON_UTF8(b), "]", "}", "}", "]");

    *adopted = false;
    SHL_ERR(cfg_find(COORD_COLL, q, NULL, &d, st));
    for (size_t i = 0; i < d.n; i++) {
        rename_req_t r;
        SHL_ERR(req_from_doc(d.docs[i], &r, st));
        if (strcmp(r.from.full, a) == 0) {
            if (!same_args(&r, req)) {
                SHL_ERR(conflict(&r, req, st));
            }
            *adopted = true;
            SHL_LOG_INFO(SHARDING, 4200145, "rename request resumes its pending coordinator",
                         "from", BCON_UTF8(r.from.full), "to", BCON_UTF8(r.to.full));
            ret = run_locked(op, &r, st);
            goto done; /* no other document names the pair while this one is pending */
        }
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

/*
 * Finish the rename of 'want' if its coordinator document is still there, and end its record
 * (a waiting retry gets the result). 0 when nothing is left of it; otherwise the thread comes
 * back to it: a request drives it now, or this run failed.
 */
static int
recover_one(const rename_req_t *want)
{
    int ret = 0;
    coord_t *c = NULL;
    rename_req_t r;
    bson_t *q = NULL, one;
    bool found = false;
    shl_status_t st;

    shl_status_clear(&st);
    bson_init(&one);
    if (!coord_adopt(want, &c)) {
        ret = 1;
        goto done;
    }
    lock_pair(want);
    /* Still pending? A request may have finished it meanwhile. */
    q = BCON_NEW("_id", BCON_UTF8(want->from.full));
    bson_destroy(&one);
    ret = cfg_find_one(COORD_COLL, q, &one, &found, &st);
    if (ret == 0 && found) {
        ret = req_from_doc(&one, &r, &st);
        /* Another document for the source means this rename ended and another started
         * (records are per source, documents written under them): end this one, and come
         * back for the new document under its own locks. */
        if (ret == 0 && !same_args(&r, want)) {
            coord_end(c, 0, &st, false);
            c = NULL;
            ret = 1;
        } else if (ret == 0) {
            ret = run_locked(NULL, &r, &st);
        }
        if (ret != 0 && c != NULL) {
            SHL_LOG_WARNING(SHARDING, 4200142, "rename recovery failed, will retry", "from",
                            BCON_UTF8(want->from.full), "error", BCON_UTF8(st.reason));
        }
    }
    unlock_pair(want);
    if (c != NULL) {
        coord_end(c, ret, &st, ret != 0 && found);
    }
done:
    if (q != NULL) {
        bson_destroy(q);
    }
    bson_destroy(&one);
    return ret;
}

static void *
recover_main(void *arg)
{
    (void)arg;
    for (;;) {
        cfg_docs_t d = {0};
        shl_status_t st;
        size_t left = 0, n = 0, nund = 0;
        rename_req_t *todo = NULL, *und = NULL;

        shl_status_clear(&st);
        pthread_mutex_lock(&rec_mu);
        rec_again = false;
        pthread_mutex_unlock(&rec_mu);
        if (cfg_find(COORD_COLL, NULL, NULL, &d, &st) != 0) {
            left = 1;
        }
        /* The documents, and the records a failed request left (their document may be gone
         * already, finished by another request: the visit ends them). */
        nund = coord_undriven(&und);
        todo = bson_malloc0((d.n + nund + 1) * sizeof(*todo));
        for (size_t i = 0; i < d.n; i++) {
            if (req_from_doc(d.docs[i], &todo[n], &st) != 0) {
                SHL_LOG_WARNING(SHARDING, 4200141, "bad rename coordinator document", "error",
                                BCON_UTF8(st.reason));
                continue;
            }
            n++;
        }
        for (size_t i = 0; i < nund; i++) {
            bool seen = false;
            for (size_t j = 0; j < n && !seen; j++) {
                seen = strcmp(todo[j].from.full, und[i].from.full) == 0;
            }
            if (!seen) {
                todo[n++] = und[i];
            }
        }
        for (size_t i = 0; i < n && !atomic_load(&rec_stop); i++) {
            if (recover_one(&todo[i]) != 0) {
                left++;
            }
        }
        bson_free(todo);
        bson_free(und);
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
    bool joined = false, adopted = false, started = false;
    coord_t *c = NULL;
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
    /* A retry of a running rename waits for it; other arguments for its source conflict. */
    SHL_ERR(coord_claim(&r, &c, &joined, st));
    if (joined) {
        SHL_LOG_INFO(SHARDING, 4200144, "rename request joins the running rename", "from",
                     BCON_UTF8(r.from.full), "to", BCON_UTF8(r.to.full));
        ret = coord_wait(op, c, st);
        c = NULL;
        goto done;
    }
    lock_pair(&r);
    locked = true;
    ret = finish_pending(op, &r, &adopted, st);
    if (ret != 0 || adopted) {
        started = adopted;
        goto done;
    }

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
        /* cfg_shard_cmd initialises its reply: reinitialising the last one here would lose
         * its buffer when the call initialises it again. */
        bson_destroy(&freply);
        SHL_ERR(cfg_shard_cmd(shards[i].name, r.from.db, &fwd, &freply, st));
    }

    /* The point of no return: from here the rename rolls forward. */
    req_to_doc(&r, &doc);
    q = BCON_NEW("_id", BCON_UTF8(r.from.full));
    SHL_ERR(cfg_update(COORD_COLL, q, &doc, true, false, NULL, st));
    started = true;
    BSON_APPEND_UTF8(&details, "from", r.from.full);
    BSON_APPEND_UTF8(&details, "to", r.to.full);
    BSON_APPEND_BOOL(&details, "dropTarget", r.drop_target);
    BSON_APPEND_BOOL(&details, "sharded", r.sharded);
    cfg_changelog(op, "renameCollection.start", r.from.full, &details);
    if (SHL_FAILPOINT_FIRES(hangRenameCollectionAfterStart)) {
        ret = rename_pause(SHL_FAILPOINT(hangRenameCollectionAfterStart), op, st);
    }
    if (ret == 0) {
        ret = run_locked(op, &r, st);
    }
    if (ret != 0) {
        /* The document stays: the recovery thread retries until the rename is done. */
        SHL_LOG_WARNING(SHARDING, 4200143, "rename failed past its start, will be finished", "from",
                        BCON_UTF8(r.from.full), "error", BCON_UTF8(st->reason));
    }
done:
    if (locked) {
        unlock_pair(&r);
    }
    if (c != NULL) {
        /* Failed past the start: the document stays and the recovery thread retries until
         * the rename is done. The request that started it answers with its error (as
         * before); one that took over a pending document is a retry: it waits for the end. */
        bool pending = started && ret != 0, wait = pending && adopted;
        if (wait) {
            pthread_mutex_lock(&coord_mu);
            c->refs++;
            pthread_mutex_unlock(&coord_mu);
        }
        coord_end(c, ret, st, pending);
        if (pending) {
            cfg_rename_recover_start();
        }
        if (wait) {
            ret = coord_wait(op, c, st);
        }
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
