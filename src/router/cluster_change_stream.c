/*
 * cluster_change_stream.c -- $changeStream through the router (MongoDB's mongos change
 * streams): the stream is opened on every shard (each one reads its own oplog; the follow-on
 * stages run there), and the router merges the shards' events by resume token, releasing an
 * event only once every other shard has passed it: a shard's frontier is its next buffered
 * event, or when it has none its postBatchResumeToken (a high-water mark that its idle oplog
 * advances with the cluster time this router gossips to it). Each shard's stream is fetched by
 * its own thread, one getMore outstanding, merged as replies arrive (MongoDB's
 * AsyncResultsMerger). docs/design/change_streams.md "Through a router".
 */
#include "bson/bson_iter.h"
#include "router/router_private.h"

#include <pthread.h>
#include <string.h>
#include <time.h>

#include "base/clock.h"
#include "base/log.h"
#include "bson/bson_util.h"
#include "bson/event_split.h"
#include "bson/resume_token.h"
#include "net/command_args.h"
#include "net/message.h"
#include "query/pipeline.h"
#include "router/cluster_cursor_manager.h"
#include "router/cluster_routing.h"
#include "sharding/catalog_cache.h"

/* A client getMore's wait for events without maxTimeMS. */
#define CS_AWAIT_DEFAULT_MS 1000
/* The config server's topology stream: its getMore only reports its high-water mark. */
#define CS_TOPOLOGY_AWAIT_MS 1
/* Shards (and the topology stream) a stream can take on after it opened: the array has fixed
 * room because the shards' fetcher threads point into it. */
#define CS_MORE_SHARDS 64
/* A shard's fetcher getMore waits this long for events (a stream being closed waits for it). */
#define CS_FETCH_AWAIT_MS 200
#define CS_FETCH_DEADLINE_MS 10000
/* At most one nudge (a no-op write that makes a waiting getMore return with a mark past the
 * held event) per idle shard per this interval. */
#define CS_NUDGE_INTERVAL_US 2000

struct cs_router;

typedef struct cs_shard {
    char name[SHL_SHARD_ID_MAX];
    int64_t cursor_id; /* 0: the shard's stream ended (after its invalidate) */
    bson_t **queue;    /* events received and not yet released, owned */
    size_t n, head, cap;
    char *pbrt; /* the shard's last postBatchResumeToken (hex), owned */
    bool skipped_ddl; /* its last DDL event was another shard's copy: skip its invalidate */
    /* Its fetcher thread (not for the topology stream): keeps one getMore outstanding while
     * its queue is empty and deposits the replies. The fields above are guarded by the
     * stream's mu once the thread runs. */
    pthread_t thread;
    bool thread_started;
    bool in_flight;       /* a getMore is outstanding */
    int64_t sent_us;      /* when it was sent (mono) */
    int64_t nudged_us;    /* the last nudge (mono) */
    int err;              /* the last getMore's error, 0 if none */
    shl_status_t err_st;
    struct cs_router *owner;
    /* The config server's stream on config.shards (named "config"): its inserts are shards
     * added, never released; its high-water mark gates the merge like a shard's. */
    bool topology;
} cs_shard_t;

typedef struct cs_router {
    char db[SHL_NS_MAX + 1];   /* the shards' cursors' database */
    char coll[SHL_NS_MAX + 1]; /* and collection (getMore's `collection`) */
    cs_shard_t *shards; /* fixed room: cap_shards */
    size_t nshards, cap_shards;
    /* Guards the shards' queues, marks, cursor ids and errors between the fetcher threads and
     * the client's getMore (which holds it except while waiting on cv or nudging);
     * docs/design/locking.md 00c. */
    pthread_mutex_t mu;
    pthread_cond_t cv;    /* a reply arrived, or a queue was emptied, or stopping */
    bool stopping;        /* the stream is being freed: fetchers end */
    shl_service_ctx_t *svc; /* for the fetchers' operation contexts */
    char *pbrt;       /* the merged stream's postBatchResumeToken (hex), owned */
    bool ended;       /* an invalidate was released */
    char *last_ddl;   /* "<operationType> <ns>" of the last DDL event released (dedup) */
    bool lookup;      /* fullDocument: updateLookup, done here through the routing table */
    /* For shards added while the stream is open: what to open on them. */
    bson_t *open_spec;     /* the $changeStream spec without resume options, owned */
    bson_t *open_rest;     /* the follow-on stages, owned */
    bool collectionless;   /* aggregate: 1 */
    uint64_t start_ts;     /* the stream's start: the topology stream starts there */
    shl_router_t *r;       /* for killing the topology cursor */
    /* A shard added (the topology stream's insert taken by the merge) to open before the
     * merge goes on, at the time it was added. */
    char join[SHL_SHARD_ID_MAX];
    uint64_t join_ts;
    /* A shard removed (the topology stream's delete taken by the merge): its cursor, no
     * longer part of the merge, to kill. */
    char leave[SHL_SHARD_ID_MAX];
    int64_t leave_cursor;
    /* With updateLookup, the follow-on stages run here, after the lookup (they may read
     * fullDocument), instead of on the shards; owned, NULL otherwise. */
    bson_t *router_stages;
    /* Events ready to send, in stream order (after updateLookup, the router's stages and the
     * split): a batch takes them up to 16 MB, the rest wait for the next getMore. Touched
     * only by the operation holding the cursor (a router cursor serves one at a time): no
     * lock. */
    bson_t **ready;
    size_t nready, iready, cap_ready;
    bool split;       /* $changeStreamSplitLargeEvent: events over 16 MB go out as fragments */
    char *resume_hex; /* the token resumed from, until the first event (a fragment's: the
                       * event's fragments up to it are left out); owned */
} cs_router_t;

/* killCursors on the topology stream's cursor (best effort; the router cursor's remotes are
 * the shards' cursors on the stream's namespace). */
static void
kill_topology(cs_router_t *cs)
{
    for (size_t i = 0; i < cs->nshards; i++) {
        const cs_shard_t *sh = &cs->shards[i];
        if (sh->topology && sh->cursor_id != 0 && cs->r != NULL) {
            bson_t cmd = BSON_INITIALIZER, ids, reply;
            shl_status_t st;
            BSON_APPEND_UTF8(&cmd, "killCursors", "shards");
            BSON_APPEND_ARRAY_BEGIN(&cmd, "cursors", &ids);
            BSON_APPEND_INT64(&ids, "0", sh->cursor_id);
            bson_append_array_end(&cmd, &ids);
            shl_status_clear(&st);
            (void)shl_remote_run_config(&cs->r->remote, "config", &cmd,
                                        &(shl_remote_options_t){.timeout_ms = 2000}, &reply, &st);
            bson_destroy(&reply);
            bson_destroy(&cmd);
        }
    }
}

static void
cs_router_free(void *state)
{
    cs_router_t *cs = state;

    /* The fetchers end once their getMore is back (CS_FETCH_AWAIT_MS at most). */
    pthread_mutex_lock(&cs->mu);
    cs->stopping = true;
    pthread_cond_broadcast(&cs->cv);
    pthread_mutex_unlock(&cs->mu);
    for (size_t i = 0; i < cs->nshards; i++) {
        if (cs->shards[i].thread_started) {
            pthread_join(cs->shards[i].thread, NULL);
        }
    }
    pthread_mutex_destroy(&cs->mu);
    pthread_cond_destroy(&cs->cv);
    kill_topology(cs);
    for (size_t i = 0; i < cs->nshards; i++) {
        for (size_t k = cs->shards[i].head; k < cs->shards[i].n; k++) {
            bson_destroy(cs->shards[i].queue[k]);
        }
        bson_free(cs->shards[i].queue);
        bson_free(cs->shards[i].pbrt);
    }
    bson_free(cs->shards);
    bson_free(cs->pbrt);
    bson_free(cs->last_ddl);
    if (cs->open_spec != NULL) {
        bson_destroy(cs->open_spec);
    }
    if (cs->open_rest != NULL) {
        bson_destroy(cs->open_rest);
    }
    if (cs->router_stages != NULL) {
        bson_destroy(cs->router_stages);
    }
    for (size_t i = cs->iready; i < cs->nready; i++) {
        bson_destroy(cs->ready[i]);
    }
    bson_free(cs->ready);
    bson_free(cs->resume_hex);
    bson_free(cs);
}

/* A new stream state; its condition variable runs on the monotonic clock (shl_clock_mono_us). */
static cs_router_t *
cs_router_new(shl_op_ctx_t *op)
{
    cs_router_t *cs = bson_malloc0(sizeof(*cs));
    pthread_condattr_t attr;

    pthread_mutex_init(&cs->mu, NULL);
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&cs->cv, &attr);
    pthread_condattr_destroy(&attr);
    cs->svc = op->svc;
    return cs;
}

static void
set_str(char **dst, const char *src)
{
    bson_free(*dst);
    *dst = src != NULL ? bson_strdup(src) : NULL;
}

/*
 * Whether event 'ev' from shard 'sh' is a copy of a DDL event that the database's primary
 * shard reports: a sharded collection's drop or rename, or a dropDatabase, is seen by every
 * shard that had the collection, and MongoDB reports it once (its participants' entries are
 * fromMigrate). The invalidate following a skipped copy is skipped with it. When the primary
 * is unknown (the database is gone from the catalog) every copy passes.
 */
static bool
ddl_copy(shl_router_t *r, cs_shard_t *sh, const bson_t *ev)
{
    bson_iter_t it, f;
    const char *type, *db = NULL;
    shl_cached_database_t info;
    shl_status_t st = SHL_STATUS_INIT;

    if (!bson_iter_init_find(&it, ev, "operationType") || !BSON_ITER_HOLDS_UTF8(&it)) {
        return false;
    }
    type = bson_iter_utf8(&it, NULL);
    if (strcmp(type, "invalidate") == 0) {
        return sh->skipped_ddl;
    }
    if (strcmp(type, "drop") != 0 && strcmp(type, "rename") != 0 &&
        strcmp(type, "dropDatabase") != 0) {
        return false;
    }
    sh->skipped_ddl = false;
    if (bson_iter_init_find(&it, ev, "ns") && BSON_ITER_HOLDS_DOCUMENT(&it) &&
        bson_iter_recurse(&it, &f) && bson_iter_find(&f, "db") && BSON_ITER_HOLDS_UTF8(&f)) {
        db = bson_iter_utf8(&f, NULL);
    }
    if (db != NULL && shl_catalog_cache_get_database(r->cache, db, &info, &st) == 0 &&
        info.primary[0] != '\0' && strcmp(info.primary, sh->name) != 0) {
        sh->skipped_ddl = true;
    }
    return sh->skipped_ddl;
}

/* Take a shard's batch ('which' of reply.cursor) and its postBatchResumeToken. */
static int
take_reply(shl_router_t *r, cs_shard_t *sh, const bson_t *reply, const char *which,
           shl_status_t *st)
{
    int ret = 0;
    bson_t cur, tok;
    bson_iter_t it, arr_it;
    const char *hex;

    if (!shl_bson_get_subdoc(reply, "cursor", &cur)) {
        SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE, "change stream reply from %s has no cursor",
                 sh->name);
    }
    if (bson_iter_init_find(&it, &cur, "id")) {
        sh->cursor_id = bson_iter_as_int64(&it);
    }
    if (shl_bson_get_subdoc(&cur, "postBatchResumeToken", &tok) &&
        (hex = shl_resume_token_doc_hex(&tok)) != NULL) {
        set_str(&sh->pbrt, hex);
    }
    if (bson_iter_init_find(&it, &cur, which) && BSON_ITER_HOLDS_ARRAY(&it) &&
        bson_iter_recurse(&it, &arr_it)) {
        while (shl_iter_next(&arr_it)) {
            bson_t ev;
            uint32_t len;
            const uint8_t *data;
            if (!BSON_ITER_HOLDS_DOCUMENT(&arr_it)) {
                continue;
            }
            bson_iter_document(&arr_it, &len, &data);
            if (!bson_init_static(&ev, data, len) || ddl_copy(r, sh, &ev)) {
                continue;
            }
            if (sh->head > 0 && sh->head == sh->n) {
                sh->head = sh->n = 0;
            }
            if (sh->n == sh->cap) {
                sh->cap = sh->cap * 2 + 16;
                sh->queue = bson_realloc(sh->queue, sh->cap * sizeof(*sh->queue));
            }
            sh->queue[sh->n++] = bson_copy(&ev);
        }
    }
done:
    return ret;
}

static const char *
event_hex(const bson_t *ev)
{
    bson_t id;
    return shl_bson_get_subdoc(ev, "_id", &id) ? shl_resume_token_doc_hex(&id) : NULL;
}

/* "<operationType> <ns.db>.<ns.coll>" of a drop/rename/dropDatabase event, else NULL. */
static char *
ddl_key(const bson_t *ev)
{
    bson_iter_t it, f;
    const char *type, *db = "", *coll = "";
    if (!bson_iter_init_find(&it, ev, "operationType") || !BSON_ITER_HOLDS_UTF8(&it)) {
        return NULL;
    }
    type = bson_iter_utf8(&it, NULL);
    if (strcmp(type, "drop") != 0 && strcmp(type, "rename") != 0 &&
        strcmp(type, "dropDatabase") != 0) {
        return NULL;
    }
    if (bson_iter_init_find(&it, ev, "ns") && BSON_ITER_HOLDS_DOCUMENT(&it) &&
        bson_iter_recurse(&it, &f)) {
        while (shl_iter_next(&f)) {
            if (strcmp(shl_iter_key(&f), "db") == 0 && BSON_ITER_HOLDS_UTF8(&f)) {
                db = bson_iter_utf8(&f, NULL);
            } else if (strcmp(shl_iter_key(&f), "coll") == 0 && BSON_ITER_HOLDS_UTF8(&f)) {
                coll = bson_iter_utf8(&f, NULL);
            }
        }
    }
    return bson_strdup_printf("%s %s.%s", type, db, coll);
}

/*
 * Move releasable events into 'arr' (at most 'limit', 0: no limit): the smallest buffered
 * event while no shard without buffered events could still produce a smaller one.
 */
/*
 * A topology event removing a shard (a delete from config.shards): the shard leaves the
 * merge at once -- everything it wrote before the removal was merged already, and a drained
 * shard writes nothing after -- and its cursor is noted for release_and_join to kill.
 */
/* Whether topology event 'ev' is a delete (a shard removed); *name its shard (NULL if the
 * event does not say; borrowed from 'ev'). */
static bool
removed_shard(const bson_t *ev, const char **name)
{
    bson_iter_t it;
    bson_t key;

    *name = NULL;
    if (!bson_iter_init_find(&it, ev, "operationType") || !BSON_ITER_HOLDS_UTF8(&it) ||
        strcmp(bson_iter_utf8(&it, NULL), "delete") != 0) {
        return false;
    }
    if (shl_bson_get_subdoc(ev, "documentKey", &key) && bson_iter_init_find(&it, &key, "_id") &&
        BSON_ITER_HOLDS_UTF8(&it)) {
        *name = bson_iter_utf8(&it, NULL);
    }
    return true;
}

static bool
topology_removed(cs_router_t *cs, const bson_t *ev)
{
    const char *name;

    if (!removed_shard(ev, &name)) {
        return false;
    }
    if (name == NULL) {
        return true;
    }
    for (size_t i = 0; i < cs->nshards; i++) {
        cs_shard_t *sh = &cs->shards[i];
        if (sh->topology || strcmp(sh->name, name) != 0 || sh->cursor_id == 0) {
            continue;
        }
        snprintf(cs->leave, sizeof(cs->leave), "%s", name);
        cs->leave_cursor = sh->cursor_id;
        sh->cursor_id = 0;
        while (sh->head < sh->n) {
            bson_destroy(sh->queue[sh->head++]);
        }
    }
    return true;
}

static void
release(cs_router_t *cs, bson_t *arr, uint32_t *n, int64_t limit)
{
    while (!cs->ended && (limit == 0 || (int64_t)*n < limit)) {
        cs_shard_t *best = NULL;
        const char *best_hex = NULL;
        bool blocked = false;
        bson_t *ev;
        char key[16];
        const char *kp;
        char *dk;

        for (size_t i = 0; i < cs->nshards; i++) {
            cs_shard_t *sh = &cs->shards[i];
            const char *h;
            if (sh->head < sh->n && (h = event_hex(sh->queue[sh->head])) != NULL &&
                (best_hex == NULL || strcmp(h, best_hex) < 0)) {
                best = sh;
                best_hex = h;
            }
        }
        if (best == NULL) {
            break;
        }
        for (size_t i = 0; i < cs->nshards; i++) {
            cs_shard_t *sh = &cs->shards[i];
            if (sh->head < sh->n || sh->cursor_id == 0) {
                continue;
            }
            if (sh->pbrt == NULL || strcmp(best_hex, sh->pbrt) > 0) {
                blocked = true;
            }
        }
        if (blocked) {
            break;
        }
        ev = best->queue[best->head++];
        if (best->topology && topology_removed(cs, ev)) {
            bson_destroy(ev);
            break;
        }
        if (best->topology) {
            /* A shard was added: open it at that time before merging anything after it. */
            bson_t doc;
            bson_iter_t it;
            if (shl_bson_get_subdoc(ev, "fullDocument", &doc) &&
                bson_iter_init_find(&it, &doc, "_id") && BSON_ITER_HOLDS_UTF8(&it) &&
                bson_iter_init_find(&it, ev, "clusterTime") && BSON_ITER_HOLDS_TIMESTAMP(&it)) {
                cs->join_ts = shl_bson_iter_timestamp_u64(&it);
                bson_iter_init_find(&it, &doc, "_id");
                snprintf(cs->join, sizeof(cs->join), "%s", bson_iter_utf8(&it, NULL));
            }
            bson_destroy(ev);
            if (cs->join[0] != '\0') {
                break;
            }
            continue;
        }
        set_str(&cs->pbrt, best_hex);
        dk = ddl_key(ev);
        if (dk != NULL && cs->last_ddl != NULL && strcmp(dk, cs->last_ddl) == 0) {
            /* The same drop seen by another shard (a sharded collection's). */
            bson_free(dk);
            bson_destroy(ev);
            continue;
        }
        {
            bson_iter_t it;
            if (bson_iter_init_find(&it, ev, "operationType") && BSON_ITER_HOLDS_UTF8(&it)) {
                if (strcmp(bson_iter_utf8(&it, NULL), "invalidate") == 0) {
                    cs->ended = true;
                } else if (dk == NULL) {
                    set_str(&cs->last_ddl, NULL);
                }
            }
        }
        if (dk != NULL) {
            bson_free(cs->last_ddl);
            cs->last_ddl = dk;
        }
        bson_uint32_to_string((*n)++, &kp, key, sizeof(key));
        BSON_APPEND_DOCUMENT(arr, kp, ev);
        bson_destroy(ev);
    }
}

/* The merged stream's postBatchResumeToken: its last event, or once nothing is buffered, the
 * smallest high-water mark of the shards still streaming (never going back). */
static void
update_pbrt(cs_router_t *cs)
{
    const char *low = NULL;
    for (size_t i = 0; i < cs->nshards; i++) {
        const cs_shard_t *sh = &cs->shards[i];
        if (sh->head < sh->n) {
            return;
        }
        if (sh->cursor_id != 0 && sh->pbrt != NULL && (low == NULL || strcmp(sh->pbrt, low) < 0)) {
            low = sh->pbrt;
        }
    }
    if (low != NULL && (cs->pbrt == NULL || strcmp(low, cs->pbrt) > 0)) {
        set_str(&cs->pbrt, low);
    }
}

/* getMore on the topology stream (config.shards on the config server) when its buffer is
 * empty and its high-water mark holds back the smallest buffered event: its shards added,
 * and its new mark. */
/* One getMore on the topology stream's cursor (a 1 ms await: it reports its mark). */
static int
topology_get_more(shl_op_ctx_t *op, shl_router_cursor_t *c, cs_shard_t *sh, shl_status_t *st)
{
    shl_router_request_t req;
    shl_fanout_result_t res;
    int ret = 0;

    req.shard = "config";
    bson_init(&req.cmd);
    BSON_APPEND_INT64(&req.cmd, "getMore", sh->cursor_id);
    BSON_APPEND_UTF8(&req.cmd, "collection", "shards");
    BSON_APPEND_INT64(&req.cmd, "maxTimeMS", CS_TOPOLOGY_AWAIT_MS);
    shl_router_send(c->r, op, "config", &req, 1, &res);
    if (res.code != 0) {
        *st = res.status;
        ret = res.code;
    } else {
        ret = take_reply(c->r, sh, &res.reply, "nextBatch", st);
    }
    shl_fanout_results_cleanup(&res, 1);
    bson_destroy(&req.cmd);
    return ret;
}

static int
fetch_topology(shl_op_ctx_t *op, shl_router_cursor_t *c, cs_router_t *cs, shl_status_t *st)
{
    int ret = 0;
    const char *low = NULL;

    /* Only when its mark holds back the next event: each call costs a round trip. */
    for (size_t i = 0; i < cs->nshards; i++) {
        const cs_shard_t *sh = &cs->shards[i];
        const char *h;
        if (!sh->topology && sh->head < sh->n && (h = event_hex(sh->queue[sh->head])) != NULL &&
            (low == NULL || strcmp(h, low) < 0)) {
            low = h;
        }
    }
    for (size_t i = 0; i < cs->nshards && low != NULL && ret == 0; i++) {
        cs_shard_t *sh = &cs->shards[i];
        if (!sh->topology || sh->cursor_id == 0 || sh->head < sh->n ||
            (sh->pbrt != NULL && strcmp(low, sh->pbrt) <= 0)) {
            continue;
        }
        ret = topology_get_more(op, c, sh, st);
    }
    return ret;
}

/*
 * Whether the topology stream reports shard 'name' removed (a getMore first when nothing of it
 * is buffered): a shard that cannot be reached may be one removed and stopped since -- the
 * removal is then merged like any topology event, and the shard is no error.
 */
static bool
topology_removes(shl_op_ctx_t *op, shl_router_cursor_t *c, cs_router_t *cs, const char *name)
{
    shl_status_t ignored = SHL_STATUS_INIT;

    for (size_t i = 0; i < cs->nshards; i++) {
        cs_shard_t *sh = &cs->shards[i];
        if (!sh->topology || sh->cursor_id == 0) {
            continue;
        }
        if (sh->head == sh->n && topology_get_more(op, c, sh, &ignored) != 0) {
            return false;
        }
        for (size_t k = sh->head; k < sh->n; k++) {
            const char *gone;
            if (removed_shard(sh->queue[k], &gone) && gone != NULL && strcmp(gone, name) == 0) {
                return true;
            }
        }
    }
    return false;
}

/* ---------------------------------------------------------------- fetchers */

/*
 * A shard's fetcher (the asynchronous merge): while the shard's queue is empty it keeps one
 * getMore outstanding and deposits the reply under cs->mu, waking the client's getMore, so an
 * event is merged as soon as it arrives and every shard that gates it has passed its time --
 * no waiting for the slowest shard's await as a fan-out does. Runs until the stream is freed.
 */
static void *
fetcher_main(void *arg)
{
    cs_shard_t *sh = arg;
    cs_router_t *cs = sh->owner;
    bson_t body = BSON_INITIALIZER;
    shl_op_ctx_t op;
    shl_status_t st = SHL_STATUS_INIT;

    BSON_APPEND_INT64(&body, "getMore", 0);
    shl_op_ctx_init(&op, cs->svc, NULL, &body, cs->db, &st);
    pthread_mutex_lock(&cs->mu);
    while (!cs->stopping) {
        shl_router_request_t req;
        shl_fanout_result_t res;
        if (sh->cursor_id == 0 || sh->err != 0 || sh->head < sh->n) {
            pthread_cond_wait(&cs->cv, &cs->mu);
            continue;
        }
        req.shard = sh->name;
        bson_init(&req.cmd);
        BSON_APPEND_INT64(&req.cmd, "getMore", sh->cursor_id);
        BSON_APPEND_UTF8(&req.cmd, "collection", cs->coll);
        BSON_APPEND_INT64(&req.cmd, "maxTimeMS", CS_FETCH_AWAIT_MS);
        sh->in_flight = true;
        sh->sent_us = shl_clock_mono_us();
        /* A shard that does not answer fails the stream's next getMore (resumable), and a
         * stream being freed waits no longer than this for its fetchers. */
        op.deadline_us = sh->sent_us + CS_FETCH_DEADLINE_MS * 1000;
        pthread_mutex_unlock(&cs->mu);
        shl_router_send(cs->r, &op, cs->db, &req, 1, &res);
        pthread_mutex_lock(&cs->mu);
        sh->in_flight = false;
        if (cs->stopping || sh->cursor_id == 0) {
            /* Freed, or it left the merge (a removed shard) while the getMore was out. */
        } else if (res.code == SHL_CODE_SHARD_NOT_FOUND) {
            /* Removed, and the registry knew before the topology stream told the merge: a
             * removed shard was drained, so nothing of it is missing; it leaves now. */
            snprintf(cs->leave, sizeof(cs->leave), "%s", sh->name);
            cs->leave_cursor = sh->cursor_id;
            sh->cursor_id = 0;
        } else if (res.code != 0) {
            sh->err = res.code;
            sh->err_st = res.status;
        } else {
            sh->err = take_reply(cs->r, sh, &res.reply, "nextBatch", &sh->err_st);
        }
        shl_fanout_results_cleanup(&res, 1);
        bson_destroy(&req.cmd);
        pthread_cond_broadcast(&cs->cv);
    }
    pthread_mutex_unlock(&cs->mu);
    bson_destroy(&body);
    return NULL;
}

/* Start a fetcher for every shard stream without one (cs->mu held). */
static void
start_fetchers(cs_router_t *cs)
{
    for (size_t i = 0; i < cs->nshards; i++) {
        cs_shard_t *sh = &cs->shards[i];
        if (sh->topology || sh->thread_started || sh->cursor_id == 0) {
            continue;
        }
        sh->owner = cs;
        SHL_INVARIANT(pthread_create(&sh->thread, NULL, fetcher_main, sh) == 0);
        sh->thread_started = true;
    }
}

/* The token of the smallest buffered event of the shards (not the topology stream), or NULL. */
static const char *
lowest_buffered(const cs_router_t *cs)
{
    const char *low = NULL;
    for (size_t i = 0; i < cs->nshards; i++) {
        const cs_shard_t *sh = &cs->shards[i];
        const char *h;
        if (!sh->topology && sh->head < sh->n && (h = event_hex(sh->queue[sh->head])) != NULL &&
            (low == NULL || strcmp(h, low) < 0)) {
            low = h;
        }
    }
    return low;
}

/*
 * An idle shard holds back the smallest buffered event when its getMore, sent before that
 * event reached the router, waits out its await with a mark below it. A no-op write there
 * (appendOplogNote; the request gossips this router's cluster time, which the event moved, so
 * the note is later than the event) ends that wait at once: its stream returns with a mark
 * past the event. Only for a getMore out for a while (a busy shard answers by itself), at most
 * once per CS_NUDGE_INTERVAL_US per shard; cs->mu held, released around the requests.
 */
static void
nudge_idle(shl_op_ctx_t *op, cs_router_t *cs)
{
    const char *low = lowest_buffered(cs);
    int64_t now = shl_clock_mono_us();
    shl_router_request_t reqs[8];
    size_t n = 0;
    shl_fanout_result_t res[8];

    for (size_t i = 0; i < cs->nshards && low != NULL && n < 8; i++) {
        cs_shard_t *sh = &cs->shards[i];
        if (sh->topology || sh->cursor_id == 0 || sh->head < sh->n || !sh->in_flight ||
            (sh->pbrt != NULL && strcmp(low, sh->pbrt) <= 0) ||
            now - sh->sent_us < CS_NUDGE_INTERVAL_US || now - sh->nudged_us < CS_NUDGE_INTERVAL_US) {
            continue;
        }
        sh->nudged_us = now;
        reqs[n].shard = sh->name;
        bson_init(&reqs[n].cmd);
        BCON_APPEND(&reqs[n].cmd, "appendOplogNote", BCON_INT32(1), "data", "{", "msg",
                    BCON_UTF8("change stream merge"), "}");
        n++;
    }
    if (n == 0) {
        return;
    }
    pthread_mutex_unlock(&cs->mu);
    shl_router_send(cs->r, op, "admin", reqs, n, res);
    shl_fanout_results_cleanup(res, n);
    pthread_mutex_lock(&cs->mu);
    shl_router_requests_cleanup(reqs, n);
}

/* The first fetcher error, into *st (cs->mu held). A shard that fails while the topology
 * stream already reports it removed (stopped after its removal) leaves the merge instead. */
static int
fetcher_error(shl_op_ctx_t *op, shl_router_cursor_t *c, cs_router_t *cs, shl_status_t *st)
{
    for (size_t i = 0; i < cs->nshards; i++) {
        cs_shard_t *sh = &cs->shards[i];
        if (sh->err == 0) {
            continue;
        }
        if (sh->cursor_id != 0 && topology_removes(op, c, cs, sh->name)) {
            snprintf(cs->leave, sizeof(cs->leave), "%s", sh->name);
            cs->leave_cursor = sh->cursor_id;
            sh->cursor_id = 0;
            sh->err = 0;
            continue;
        }
        *st = sh->err_st;
        return sh->err;
    }
    return 0;
}

/* ---------------------------------------------------------------- updateLookup */

typedef struct lookup_arg {
    const char *coll;
    const bson_t *key;
} lookup_arg_t;

static void
build_lookup(void *arg, const shl_router_routing_t *rr, const char *shard, bson_t *cmd)
{
    const lookup_arg_t *a = arg;
    (void)rr;
    (void)shard;
    BSON_APPEND_UTF8(cmd, "find", a->coll);
    BSON_APPEND_DOCUMENT(cmd, "filter", a->key);
    BSON_APPEND_INT64(cmd, "limit", 1);
    BSON_APPEND_BOOL(cmd, "singleBatch", true);
}

/*
 * The current document with the event's documentKey, read through the routing table (so the
 * shard that owns it now answers, wherever the chunk has moved since the event): appended to
 * 'out' as fullDocument, null when there is none.
 */
static int
lookup_full_document(shl_op_ctx_t *op, const bson_t *ev, bson_t *out, shl_status_t *st)
{
    int ret = 0;
    shl_router_t *r = shl_router_get(op);
    bson_t nsd, key, cur, doc;
    bson_iter_t it, b;
    const char *db = NULL, *coll = NULL;
    char ns[2 * SHL_NS_MAX + 2];
    shl_router_shard_result_t *res = NULL;
    size_t n = 0;
    lookup_arg_t a;
    bool found = false;

    if (!shl_bson_get_subdoc(ev, "ns", &nsd) || !shl_bson_get_subdoc(ev, "documentKey", &key)) {
        goto done;
    }
    if (bson_iter_init_find(&it, &nsd, "db") && BSON_ITER_HOLDS_UTF8(&it)) {
        db = bson_iter_utf8(&it, NULL);
    }
    if (bson_iter_init_find(&it, &nsd, "coll") && BSON_ITER_HOLDS_UTF8(&it)) {
        coll = bson_iter_utf8(&it, NULL);
    }
    if (db == NULL || coll == NULL) {
        goto done;
    }
    snprintf(ns, sizeof(ns), "%s.%s", db, coll);
    a.coll = coll;
    a.key = &key;
    ret = shl_router_scatter(r, op, ns, &key, build_lookup, &a, NULL, &res, &n, st);
    if (ret == SHL_CODE_NAMESPACE_NOT_FOUND) {
        shl_status_clear(st);
        ret = 0;
        goto done;
    }
    SHL_ERR(ret);
    for (size_t i = 0; i < n && !found; i++) {
        if (res[i].res.code != 0) {
            *st = res[i].res.status;
            SHL_ERR(res[i].res.code);
        }
        if (shl_bson_get_subdoc(&res[i].res.reply, "cursor", &cur) &&
            bson_iter_init_find(&it, &cur, "firstBatch") && bson_iter_recurse(&it, &b) &&
            shl_iter_next(&b) && BSON_ITER_HOLDS_DOCUMENT(&b)) {
            uint32_t len;
            const uint8_t *data;
            bson_iter_document(&b, &len, &data);
            if (bson_init_static(&doc, data, len)) {
                BSON_APPEND_DOCUMENT(out, "fullDocument", &doc);
                found = true;
            }
        }
    }
done:
    if (ret == 0 && !found) {
        BSON_APPEND_NULL(out, "fullDocument");
    }
    shl_router_scatter_results_free(res, n);
    return ret;
}

/* Give every update event of 'arr' its looked-up fullDocument (before ns, MongoDB's order). */
static int
add_lookups(shl_op_ctx_t *op, bson_t *arr, shl_status_t *st)
{
    int ret = 0;
    bson_t fixed = BSON_INITIALIZER;
    bson_iter_t it, f;
    bool any = false;

    bson_iter_init(&it, arr);
    while (shl_iter_next(&it)) {
        bson_t ev, out;
        uint32_t len;
        const uint8_t *data;
        bson_iter_t t;
        bool update;
        bson_iter_document(&it, &len, &data);
        bson_init_static(&ev, data, len);
        update = bson_iter_init_find(&t, &ev, "operationType") && BSON_ITER_HOLDS_UTF8(&t) &&
                 strcmp(bson_iter_utf8(&t, NULL), "update") == 0;
        if (!update) {
            BSON_APPEND_DOCUMENT(&fixed, shl_iter_key(&it), &ev);
            continue;
        }
        any = true;
        bson_append_document_begin(&fixed, shl_iter_key(&it), -1, &out);
        bson_iter_init(&f, &ev);
        while (shl_iter_next(&f)) {
            if (strcmp(shl_iter_key(&f), "fullDocument") == 0) {
                continue;
            }
            if (strcmp(shl_iter_key(&f), "ns") == 0) {
                ret = lookup_full_document(op, &ev, &out, st);
                if (ret != 0) {
                    bson_append_document_end(&fixed, &out);
                    goto done;
                }
            }
            bson_append_iter(&out, NULL, 0, &f);
        }
        bson_append_document_end(&fixed, &out);
    }
    if (any) {
        bson_reinit(arr);
        bson_concat(arr, &fixed);
    }
done:
    bson_destroy(&fixed);
    return ret;
}

static void
push_ready(cs_router_t *cs, bson_t *ev)
{
    if (cs->nready == cs->cap_ready) {
        cs->cap_ready = cs->cap_ready == 0 ? 16 : cs->cap_ready * 2;
        cs->ready = bson_realloc(cs->ready, cs->cap_ready * sizeof(*cs->ready));
    }
    cs->ready[cs->nready++] = ev;
}

/* 'ev' (its own token 'hex') over 16 MB: its fragments when the split was asked for, else
 * BSONObjectTooLarge as a node says it. */
static int
ready_large(cs_router_t *cs, const bson_t *ev, const char *hex, shl_status_t *st)
{
    bson_t **frags = NULL;
    size_t nf = 0;
    int ret = 0;

    if (!cs->split) {
        SHL_FAIL(st, SHL_CODE_BSON_OBJECT_TOO_LARGE,
                 "BSONObj size: %u (0x%X) is invalid. Size must be between 0 and 16793600(16MB) "
                 "First element: _id: %s (use $changeStreamSplitLargeEvent to split such "
                 "events)",
                 (unsigned)ev->len, (unsigned)ev->len, hex);
    }
    SHL_ERR(shl_event_split(ev, hex, cs->resume_hex, SHL_MAX_BSON_SIZE, &frags, &nf, st));
    for (size_t i = 0; i < nf; i++) {
        push_ready(cs, frags[i]);
    }
done:
    bson_free(frags);
    return ret;
}

/* What the router adds to released events ('arr', emptied): updateLookup's documents, then
 * the follow-on stages that had to wait for them, then the split of events over 16 MB; the
 * results join cs->ready. */
static int
finish_events(shl_op_ctx_t *op, cs_router_t *cs, bson_t *arr, shl_status_t *st)
{
    int ret = 0;
    bson_t out = BSON_INITIALIZER;
    bson_iter_t it;
    uint32_t n = 0;

    if (cs->lookup && !bson_empty(arr)) {
        SHL_ERR(add_lookups(op, arr, st));
        if (cs->router_stages != NULL) {
            SHL_ERR(shl_pipeline_run_array(arr, cs->router_stages, &out, &n, st));
            bson_reinit(arr);
            bson_concat(arr, &out);
        }
    }
    bson_iter_init(&it, arr);
    while (shl_iter_next(&it)) {
        bson_t ev;
        const char *hex;
        if (!shl_bson_iter_view(&it, &ev)) {
            continue;
        }
        hex = event_hex(&ev);
        if (ev.len > SHL_MAX_BSON_SIZE) {
            SHL_ERR(ready_large(cs, &ev, hex != NULL ? hex : "", st));
        } else {
            push_ready(cs, bson_copy(&ev));
        }
        bson_free(cs->resume_hex);
        cs->resume_hex = NULL;
    }
done:
    bson_reinit(arr);
    bson_destroy(&out);
    return ret;
}

/* Move ready events into batch 'arr': up to 'limit' (0: no limit) and 16 MB in all (the first
 * always). *pbrt: the batch's postBatchResumeToken when events stay behind (its last event's
 * token, borrowed from cs->ready until the next batch), else NULL (the merged stream's). */
static void
take_batch(cs_router_t *cs, bson_t *arr, int64_t limit, const char **pbrt)
{
    uint32_t n = 0;
    size_t total = 0;
    char key[16];
    const char *kp;

    *pbrt = NULL;
    while (cs->iready < cs->nready && (limit == 0 || (int64_t)n < limit)) {
        bson_t *ev = cs->ready[cs->iready];
        if (n > 0 && total + ev->len > SHL_MAX_BSON_SIZE) {
            break;
        }
        total += ev->len;
        bson_uint32_to_string(n++, &kp, key, sizeof(key));
        BSON_APPEND_DOCUMENT(arr, kp, ev);
        *pbrt = event_hex(ev);
        /* Freed once the batch is built (the token is borrowed until then): kept at the
         * front, released by the next take or the stream's end. */
        cs->iready++;
    }
    if (cs->iready == cs->nready) {
        *pbrt = NULL;
    }
}

/* The sent events before cs->iready are freed; the held ones move to the front. */
static void
drop_sent(cs_router_t *cs)
{
    for (size_t i = 0; i < cs->iready; i++) {
        bson_destroy(cs->ready[i]);
    }
    memmove(cs->ready, cs->ready + cs->iready, (cs->nready - cs->iready) * sizeof(*cs->ready));
    cs->nready -= cs->iready;
    cs->iready = 0;
}

/* Whether the stream has ended for the client: the invalidate was released and sent. */
static bool
stream_over(const cs_router_t *cs)
{
    return cs->ended && cs->iready == cs->nready;
}

static void
reply_batch(const cs_router_t *cs, bson_t *reply, const char *ns, int64_t id, bool first,
            const bson_t *arr, const char *held_pbrt)
{
    bson_t cur, tok;
    const char *pbrt = held_pbrt != NULL ? held_pbrt : cs->pbrt;
    BSON_APPEND_DOCUMENT_BEGIN(reply, "cursor", &cur);
    BSON_APPEND_ARRAY(&cur, first ? "firstBatch" : "nextBatch", arr);
    if (pbrt != NULL) {
        BSON_APPEND_DOCUMENT_BEGIN(&cur, "postBatchResumeToken", &tok);
        BSON_APPEND_UTF8(&tok, "_data", pbrt);
        bson_append_document_end(&cur, &tok);
    }
    BSON_APPEND_INT64(&cur, "id", id);
    BSON_APPEND_UTF8(&cur, "ns", ns);
    bson_append_document_end(reply, &cur);
}

static int join_shard(shl_op_ctx_t *op, shl_router_cursor_t *c, cs_router_t *cs,
                      const char *name, uint64_t start_at, shl_status_t *st);

/* A removed shard's cursor (topology_removed): killed, best effort -- the shard may be gone
 * already -- and no longer the router cursor's remote. */
static void
leave_shard(shl_op_ctx_t *op, shl_router_cursor_t *c, cs_router_t *cs)
{
    shl_router_request_t req;
    shl_fanout_result_t res;
    bson_t ids;

    req.shard = cs->leave;
    bson_init(&req.cmd);
    BSON_APPEND_UTF8(&req.cmd, "killCursors", cs->coll);
    BSON_APPEND_ARRAY_BEGIN(&req.cmd, "cursors", &ids);
    BSON_APPEND_INT64(&ids, "0", cs->leave_cursor);
    bson_append_array_end(&req.cmd, &ids);
    shl_router_send(c->r, op, cs->db, &req, 1, &res);
    shl_fanout_results_cleanup(&res, 1);
    bson_destroy(&req.cmd);
    for (size_t j = 0; j < c->nremotes; j++) {
        if (strcmp(c->remotes[j].shard, cs->leave) == 0) {
            c->remotes[j].cursor_id = 0;
        }
    }
    SHL_LOG_INFO(SHARDING, 2100003, "change stream closed on a removed shard", "shard",
                 BCON_UTF8(cs->leave), "ns", BCON_UTF8(c->ns));
    cs->leave[0] = '\0';
    cs->leave_cursor = 0;
}

/* Release what the merge allows; a shard added on the way (the topology stream's event) is
 * opened at its time and the merge goes on, a shard removed leaves it. */
static int
release_and_join(shl_op_ctx_t *op, shl_router_cursor_t *c, cs_router_t *cs, bson_t *arr,
                 uint32_t *n, int64_t limit, shl_status_t *st)
{
    int ret = 0;

    release(cs, arr, n, limit);
    while (cs->join[0] != '\0' || cs->leave[0] != '\0') {
        char name[SHL_SHARD_ID_MAX];
        if (cs->leave[0] != '\0') {
            leave_shard(op, c, cs);
        } else {
            snprintf(name, sizeof(name), "%s", cs->join);
            cs->join[0] = '\0';
            SHL_ERR(join_shard(op, c, cs, name, cs->join_ts, st));
        }
        release(cs, arr, n, limit);
    }
done:
    return ret;
}

/* Fill a batch: fetch and release until an event is released or 'deadline_us' passes. */
static int
fill(shl_op_ctx_t *op, shl_router_cursor_t *c, cs_router_t *cs, int64_t batch_size,
     int64_t deadline_us, bson_t *arr, shl_status_t *st)
{
    int ret = 0;
    uint32_t n = 0;

    pthread_mutex_lock(&cs->mu);
    start_fetchers(cs);
    SHL_ERR(release_and_join(op, c, cs, arr, &n, batch_size, st));
    while (n == 0 && !cs->ended) {
        int64_t now = shl_clock_mono_us(), until;
        struct timespec ts;
        SHL_ERR(fetcher_error(op, c, cs, st));
        SHL_ERR(release_and_join(op, c, cs, arr, &n, batch_size, st));
        if (n > 0 || cs->ended) {
            break;
        }
        if (now >= deadline_us) {
            break;
        }
        start_fetchers(cs);
        nudge_idle(op, cs);
        /* The topology stream's mark, when it holds back the smallest event. */
        SHL_ERR(fetch_topology(op, c, cs, st));
        SHL_ERR(release_and_join(op, c, cs, arr, &n, batch_size, st));
        if (n > 0 || cs->ended) {
            break;
        }
        /* Wait for a reply (a nudge may be due again: look every interval). */
        until = now + CS_NUDGE_INTERVAL_US * 2 < deadline_us ? now + CS_NUDGE_INTERVAL_US * 2
                                                             : deadline_us;
        ts.tv_sec = until / 1000000;
        ts.tv_nsec = (until % 1000000) * 1000;
        pthread_cond_timedwait(&cs->cv, &cs->mu, &ts);
        SHL_ERR(release_and_join(op, c, cs, arr, &n, batch_size, st));
        SHL_ERR(shl_op_check_interrupt(op, st));
    }
    update_pbrt(cs);
    /* Queues emptied: their fetchers go on. */
    pthread_cond_broadcast(&cs->cv);
    for (size_t i = 0; i < cs->nshards; i++) {
        for (size_t j = 0; j < c->nremotes; j++) {
            if (strcmp(c->remotes[j].shard, cs->shards[i].name) == 0 &&
                !cs->shards[i].topology) {
                c->remotes[j].cursor_id = cs->shards[i].cursor_id;
            }
        }
    }
done:
    pthread_mutex_unlock(&cs->mu);
    if (ret == 0) {
        ret = finish_events(op, cs, arr, st);
    }
    return ret;
}

/* ---------------------------------------------------------------- open */

typedef struct open_arg {
    const bson_t *stage_spec;
    const bson_t *rest;
    const char *coll; /* NULL: aggregate: 1 */
    uint64_t start_at;
    bool joining; /* a shard added while the stream is open */
} open_arg_t;

static void
build_open(void *arg, const shl_router_routing_t *rr, const char *shard, bson_t *cmd)
{
    open_arg_t *a = arg;
    bson_t pl, st, spec, cur;
    bson_iter_t it;
    uint32_t i = 1;
    (void)rr;
    (void)shard;

    if (a->coll != NULL) {
        BSON_APPEND_UTF8(cmd, "aggregate", a->coll);
    } else {
        BSON_APPEND_INT32(cmd, "aggregate", 1);
    }
    BSON_APPEND_ARRAY_BEGIN(cmd, "pipeline", &pl);
    BSON_APPEND_DOCUMENT_BEGIN(&pl, "0", &st);
    BSON_APPEND_DOCUMENT_BEGIN(&st, "$changeStream", &spec);
    bson_concat(&spec, a->stage_spec);
    if (a->joining) {
        BSON_APPEND_BOOL(&spec, "$_joiningShard", true);
    }
    if (a->start_at != 0) {
        BSON_APPEND_TIMESTAMP(&spec, "startAtOperationTime", (uint32_t)(a->start_at >> 32),
                              (uint32_t)(a->start_at & 0xffffffffu));
    }
    bson_append_document_end(&st, &spec);
    bson_append_document_end(&pl, &st);
    if (bson_iter_init(&it, a->rest)) {
        while (shl_iter_next(&it)) {
            char key[16];
            const char *kp;
            bson_uint32_to_string(i++, &kp, key, sizeof(key));
            bson_append_iter(&pl, kp, -1, &it);
        }
    }
    bson_append_array_end(cmd, &pl);
    BSON_APPEND_DOCUMENT_BEGIN(cmd, "cursor", &cur);
    bson_append_document_end(cmd, &cur);
}

/*
 * Open the stream on shard 'name', added while it is open (the config server's topology
 * stream reported it, as MongoDB's routers learn of new shards), at 'start_at', the time it
 * was added: the merge has released nothing after that time yet (the topology stream's
 * high-water mark gates it), so no event of the new shard comes out of order. With
 * $_joiningShard its oplog may begin after that time (it holds nothing from before). A shard
 * the stream already reads (a stream resumed from before it was added) is left alone.
 */
static int
join_shard(shl_op_ctx_t *op, shl_router_cursor_t *c, cs_router_t *cs, const char *name,
           uint64_t start_at, shl_status_t *st)
{
    int ret = 0;
    shl_router_request_t req;
    shl_fanout_result_t res;
    bool sent = false;
    open_arg_t a;
    cs_shard_t *sh;
    bson_t empty = BSON_INITIALIZER, cur, b;

    if (cs->open_spec == NULL || cs->ended) {
        goto done;
    }
    for (size_t k = 0; k < cs->nshards; k++) {
        /* (A shard removed earlier, cursor 0, may come back under its name.) */
        if (strcmp(cs->shards[k].name, name) == 0 && cs->shards[k].cursor_id != 0) {
            goto done;
        }
    }
    memset(&a, 0, sizeof(a));
    a.stage_spec = cs->open_spec;
    a.rest = cs->open_rest;
    a.coll = cs->collectionless ? NULL : cs->coll;
    a.start_at = start_at > cs->start_ts ? start_at : cs->start_ts;
    a.joining = true;
    req.shard = name;
    bson_init(&req.cmd);
    build_open(&a, NULL, name, &req.cmd);
    shl_router_send(c->r, op, cs->db, &req, 1, &res);
    sent = true;
    if (res.code != 0) {
        *st = res.status;
        SHL_ERR(res.code);
    }
    if (cs->nshards == cs->cap_shards) {
        SHL_FAIL(st, SHL_CODE_INTERNAL_ERROR,
                 "a change stream opened with %zu shards takes at most %d more",
                 cs->cap_shards - CS_MORE_SHARDS, CS_MORE_SHARDS - 1);
    }
    sh = &cs->shards[cs->nshards++];
    memset(sh, 0, sizeof(*sh));
    snprintf(sh->name, sizeof(sh->name), "%s", name);
    SHL_ERR(take_reply(c->r, sh, &res.reply, "firstBatch", st));
    BSON_APPEND_DOCUMENT_BEGIN(&empty, "cursor", &cur);
    BSON_APPEND_INT64(&cur, "id", sh->cursor_id);
    BSON_APPEND_ARRAY_BEGIN(&cur, "firstBatch", &b);
    bson_append_array_end(&cur, &b);
    bson_append_document_end(&empty, &cur);
    shl_router_cursor_add_remote(c, sh->name, &empty, st);
    SHL_LOG_INFO(SHARDING, 2100002, "change stream opened on a new shard", "shard",
                 BCON_UTF8(name), "ns", BCON_UTF8(c->ns));
done:
    if (sent) {
        shl_fanout_results_cleanup(&res, 1);
        bson_destroy(&req.cmd);
    }
    bson_destroy(&empty);
    return ret;
}

/*
 * Open the topology stream: config.shards on the config server from the stream's start, its
 * inserts only, starting at its oplog's beginning when that is later ($_joiningShard).
 */
static int
open_topology(shl_op_ctx_t *op, shl_router_cursor_t *c, cs_router_t *cs, shl_status_t *st)
{
    int ret = 0;
    shl_router_request_t req;
    shl_fanout_result_t res;
    cs_shard_t *sh;
    bson_t *m = BCON_NEW("0", "{", "$match", "{", "operationType", "{", "$in", "[",
                         BCON_UTF8("insert"), BCON_UTF8("delete"), "]", "}", "}", "}");
    bson_t spec = BSON_INITIALIZER;
    open_arg_t a;

    BSON_APPEND_BOOL(&spec, "allowToRunOnConfigDB", true);
    memset(&a, 0, sizeof(a));
    a.stage_spec = &spec;
    a.rest = m;
    a.coll = "shards";
    a.start_at = cs->start_ts;
    a.joining = true;
    req.shard = "config";
    bson_init(&req.cmd);
    build_open(&a, NULL, "config", &req.cmd);
    shl_router_send(c->r, op, "config", &req, 1, &res);
    if (res.code != 0) {
        *st = res.status;
        SHL_ERR(res.code);
    }
    sh = &cs->shards[cs->nshards++];
    memset(sh, 0, sizeof(*sh));
    snprintf(sh->name, sizeof(sh->name), "config");
    sh->topology = true;
    SHL_ERR(take_reply(c->r, sh, &res.reply, "firstBatch", st));
done:
    shl_fanout_results_cleanup(&res, 1);
    bson_destroy(&req.cmd);
    bson_destroy(&spec);
    bson_destroy(m);
    return ret;
}

/*
 * With updateLookup the follow-on stages 'rest' run here, after the lookup (they may read
 * fullDocument): checked as a shard would, moved to cs->router_stages ('rest' keeps only
 * what the shards run). A last $changeStreamSplitLargeEvent is the router's own split, after
 * the lookup; the shards get it alone, for events too large even before it.
 */
static int
take_router_stages(cs_router_t *cs, bson_t *rest, shl_status_t *st)
{
    static const char *const allowed[] = {"$match",   "$project",     "$addFields",
                                          "$set",     "$unset",       "$replaceRoot",
                                          "$replaceWith", "$redact",  NULL};
    static const char split_stage[] = "$changeStreamSplitLargeEvent";
    bson_iter_t f, sf;
    bson_t kept = BSON_INITIALIZER, empty;
    uint32_t nkept = 0, nrest = bson_count_keys(rest), k = 0;
    int ret = 0;

    bson_iter_init(&f, rest);
    while (shl_iter_next(&f)) {
        bool ok = false;
        const char *name;
        char key[16];
        const char *kp;
        k++;
        if (!BSON_ITER_HOLDS_DOCUMENT(&f) || !bson_iter_recurse(&f, &sf) || !shl_iter_next(&sf)) {
            SHL_FAIL(st, 40323,
                     "A pipeline stage specification object must contain exactly one field.");
        }
        name = shl_iter_key(&sf);
        if (strcmp(name, "$changeStream") == 0) {
            SHL_FAIL(st, 40602, "$changeStream is only valid as the first stage in a pipeline.");
        }
        if (strcmp(name, split_stage) == 0) {
            bson_iter_t arg;
            if (k != nrest) {
                SHL_FAIL(st, 7182802,
                         "$changeStreamSplitLargeEvent must be the last stage in the pipeline");
            }
            if (!BSON_ITER_HOLDS_DOCUMENT(&sf) || !bson_iter_recurse(&sf, &arg) ||
                bson_iter_next(&arg)) {
                SHL_FAIL(st, 7182800,
                         "$changeStreamSplitLargeEvent accepts only an empty object as argument");
            }
            cs->split = true;
            continue;
        }
        for (int j = 0; allowed[j] != NULL; j++) {
            ok |= strcmp(name, allowed[j]) == 0;
        }
        if (!ok) {
            SHL_FAIL(st, SHL_CODE_ILLEGAL_OPERATION,
                     "%s is not permitted in a $changeStream pipeline", name);
        }
        bson_uint32_to_string(nkept++, &kp, key, sizeof(key));
        bson_append_iter(&kept, kp, -1, &f);
    }
    if (nkept > 0) {
        cs->router_stages = bson_copy(&kept);
    }
    bson_reinit(rest);
    if (cs->split) {
        bson_t stage;
        BSON_APPEND_DOCUMENT_BEGIN(rest, "0", &stage);
        BSON_APPEND_DOCUMENT_BEGIN(&stage, split_stage, &empty);
        bson_append_document_end(&stage, &empty);
        bson_append_document_end(rest, &stage);
    }
done:
    bson_destroy(&kept);
    return ret;
}

int
router_change_stream_aggregate(shl_op_ctx_t *op, const bson_t *cmd, const char *coll,
                               const bson_t *pipeline, bson_t *reply, shl_status_t *st)
{
    int ret = 0;
    shl_router_t *r = shl_router_get(op);
    cs_router_t *cs = cs_router_new(op);
    shl_router_cursor_t *c = NULL;
    shl_router_shard_result_t *res = NULL;
    size_t nres = 0;
    bson_t spec = BSON_INITIALIZER, rest = BSON_INITIALIZER, arr = BSON_INITIALIZER;
    bson_iter_t it, stage;
    open_arg_t a;
    char ns[2 * SHL_NS_MAX + 2];
    int64_t batch_size = 0, id = 0;
    bool zero = false;
    uint32_t i = 0;

    /* The $changeStream spec and the stages after it, sent to every shard. */
    bson_iter_init(&it, pipeline);
    while (shl_iter_next(&it)) {
        if (i++ == 0) {
            bson_t view;
            if (BSON_ITER_HOLDS_DOCUMENT(&it) && bson_iter_recurse(&it, &stage) &&
                shl_iter_next(&stage) && BSON_ITER_HOLDS_DOCUMENT(&stage)) {
                uint32_t len;
                const uint8_t *data;
                bson_iter_document(&stage, &len, &data);
                bson_init_static(&view, data, len);
                bson_concat(&spec, &view);
            } else {
                SHL_FAIL(st, 50808, "$changeStream stage expects a document as argument");
            }
            continue;
        }
        {
            char key[16];
            const char *kp;
            bson_uint32_to_string(i - 2, &kp, key, sizeof(key));
            bson_append_iter(&rest, kp, -1, &it);
        }
    }
    {
        /* updateLookup is done here, through the routing table: the shards send the event
         * alone, and the lookup finds the document on whichever shard owns it by then. */
        bson_iter_t f;
        if (bson_iter_init_find(&f, &spec, "fullDocument") && BSON_ITER_HOLDS_UTF8(&f) &&
            strcmp(bson_iter_utf8(&f, NULL), "updateLookup") == 0) {
            bson_t copy = BSON_INITIALIZER;
            bson_iter_init(&f, &spec);
            while (shl_iter_next(&f)) {
                if (strcmp(shl_iter_key(&f), "fullDocument") != 0) {
                    bson_append_iter(&copy, NULL, 0, &f);
                }
            }
            bson_reinit(&spec);
            bson_concat(&spec, &copy);
            bson_destroy(&copy);
            cs->lookup = true;
        }
    }
    if (cs->lookup && !bson_empty(&rest)) {
        SHL_ERR(take_router_stages(cs, &rest, st));
    }
    SHL_ERR(router_cursor_batch_size(cmd, &batch_size, &zero, st));
    memset(&a, 0, sizeof(a));
    a.stage_spec = &spec;
    a.rest = &rest;
    a.coll = coll;
    if (!bson_has_field(&spec, "resumeAfter") && !bson_has_field(&spec, "startAfter") &&
        !bson_has_field(&spec, "startAtOperationTime")) {
        /* Every shard starts after the newest time this router has seen, so a write it
         * acknowledged before is not reported, and one after it is, whichever shard has it. */
        a.start_at = shl_vector_clock_get(&r->clock, SHL_VC_CLUSTER_TIME) + 1;
    }
    snprintf(cs->db, sizeof(cs->db), "%s", op->db);
    snprintf(cs->coll, sizeof(cs->coll), "%s", coll != NULL ? coll : "$cmd.aggregate");
    {
        /* What a shard added later gets: the spec without resume options, from the start. */
        bson_iter_t f;
        shl_resume_token_t t;
        bson_t tok;
        char why[128];
        cs->open_spec = bson_new();
        cs->open_rest = bson_copy(&rest);
        cs->collectionless = coll == NULL;
        cs->start_ts = a.start_at;
        bson_iter_init(&f, &spec);
        while (shl_iter_next(&f)) {
            const char *k = shl_iter_key(&f);
            const char *hx = NULL;
            if ((strcmp(k, "resumeAfter") == 0 || strcmp(k, "startAfter") == 0) &&
                shl_bson_get_subdoc(&spec, k, &tok) && shl_resume_token_parse(&tok, &t, &hx, why)) {
                cs->start_ts = t.cluster_time;
                set_str(&cs->resume_hex, hx);
            } else if (strcmp(k, "startAtOperationTime") == 0 && BSON_ITER_HOLDS_TIMESTAMP(&f)) {
                cs->start_ts = shl_bson_iter_timestamp_u64(&f);
            } else {
                bson_append_iter(cs->open_spec, NULL, 0, &f);
            }
        }
        cs->r = r;
    }
    snprintf(ns, sizeof(ns), "%s.%s", cs->db, cs->coll);
    SHL_ERR(shl_router_send_to_all(r, op, op->db, false, build_open, &a, &res, &nres, st));
    for (size_t k = 0; k < nres; k++) {
        if (res[k].res.code != 0) {
            *st = res[k].res.status;
            ret = res[k].res.code;
            break;
        }
    }
    c = shl_router_cursor_new(r, ns, cs->db, cs->coll);
    /* Fixed room: the shards' fetcher threads hold pointers into the array. */
    cs->cap_shards = nres + CS_MORE_SHARDS;
    cs->shards = bson_malloc0(cs->cap_shards * sizeof(*cs->shards));
    for (size_t k = 0; k < nres; k++) {
        cs_shard_t *sh = &cs->shards[cs->nshards++];
        bson_t empty = BSON_INITIALIZER, cur, b;
        snprintf(sh->name, sizeof(sh->name), "%s", res[k].shard);
        if (res[k].res.code == 0 && ret == 0) {
            ret = take_reply(r, sh, &res[k].res.reply, "firstBatch", st);
        }
        /* The cursor's remotes only carry the ids, so destroying it kills the shards' cursors. */
        BSON_APPEND_DOCUMENT_BEGIN(&empty, "cursor", &cur);
        BSON_APPEND_INT64(&cur, "id", sh->cursor_id);
        BSON_APPEND_ARRAY_BEGIN(&cur, "firstBatch", &b);
        bson_append_array_end(&cur, &b);
        bson_append_document_end(&empty, &cur);
        shl_router_cursor_add_remote(c, sh->name, &empty, st);
        bson_destroy(&empty);
    }
    c->env_state = cs;
    c->env_state_free = cs_router_free;
    c->change_stream = true;
    cs = NULL;
    SHL_ERR(ret);
    SHL_ERR(open_topology(op, c, c->env_state, st));
    {
        cs_router_t *s = c->env_state;
        uint32_t n = 0;
        const char *held = NULL;
        bool over;
        SHL_ERR(release_and_join(op, c, s, &arr, &n, batch_size, st));
        update_pbrt(s);
        if (n > 0) {
            ret = finish_events(op, s, &arr, st);
            if (ret != 0) {
                shl_router_cursor_destroy(c);
                c = NULL;
                goto done;
            }
        }
        take_batch(s, &arr, batch_size, &held);
        over = stream_over(s);
        if (!over) {
            shl_op_user_digest(op, c->owner);
            id = shl_router_cursor_manager_register(r->cursors, c);
        }
        reply_batch(s, reply, ns, id, true, &arr, held);
        drop_sent(s);
        if (over) {
            shl_router_cursor_destroy(c);
        }
        c = NULL;
    }
done:
    shl_router_cursor_destroy(c);
    if (cs != NULL) {
        cs_router_free(cs);
    }
    shl_router_scatter_results_free(res, nres);
    bson_destroy(&spec);
    bson_destroy(&rest);
    bson_destroy(&arr);
    return ret;
}

int
router_change_stream_get_more(shl_op_ctx_t *op, shl_router_cursor_t *c, int64_t batch_size,
                              bson_t *reply, bool *dead, shl_status_t *st)
{
    int ret = 0;
    cs_router_t *cs = c->env_state;
    bson_t arr = BSON_INITIALIZER;
    int64_t deadline_us;
    const char *held = NULL;

    /* maxTimeMS of an awaitData getMore is how long to wait for events. */
    deadline_us = op->deadline_us != 0 ? op->deadline_us
                                       : shl_clock_mono_us() + CS_AWAIT_DEFAULT_MS * 1000;
    op->deadline_us = 0;
    *dead = false;
    if (cs->iready == cs->nready) {
        SHL_ERR(fill(op, c, cs, batch_size, deadline_us, &arr, st));
    }
    take_batch(cs, &arr, batch_size, &held);
    *dead = stream_over(cs);
    reply_batch(cs, reply, c->ns, *dead ? 0 : c->id, false, &arr, held);
    drop_sent(cs);
done:
    bson_destroy(&arr);
    return ret;
}
