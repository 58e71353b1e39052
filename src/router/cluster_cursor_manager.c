/*
 * cluster_cursor_manager.c -- see cluster_cursor_manager.h: router cursors (merging the
 * shards' batches, global skip/limit/projection, an aggregation's merge part, getMore to
 * the shards as buffers drain) and the manager that keeps them between getMores.
 */
#include "bson/bson_iter.h"
#include "bson/bson_util.h"
#include "router/cluster_cursor_manager.h"

#include <pthread.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "base/clock.h"
#include "base/log.h"
#include "base/options.h"
#include "base/str.h"
#include "net/message.h"
#include "query/text.h"
#include "router/cluster_routing.h"

/* Bound on the killCursors sent when a router cursor ends early. */
#define KILL_TIMEOUT_MS 5000
/* MongoDB's clientCursorMonitor period. */
#define REAPER_PERIOD_MS 4000

/* ---------------------------------------------------------------- cursors */

shl_router_cursor_t *
shl_router_cursor_new(struct shl_router *r, const char *ns, const char *db, const char *coll)
{
    shl_router_cursor_t *c = bson_malloc0(sizeof(*c));

    c->r = r;
    shl_str_copy(c->ns, sizeof(c->ns), ns);
    shl_str_copy(c->db, sizeof(c->db), db);
    shl_str_copy(c->coll, sizeof(c->coll), coll);
    bson_init(&c->projected);
    bson_init(&c->fixed);
    return c;
}

void
shl_router_cursor_set_session(shl_router_cursor_t *c, const shl_op_ctx_t *op)
{
    c->at_cluster_time = shl_router_snapshot_time(op);
    if (!op->has_lsid) {
        return;
    }
    c->session = bson_new();
    c->has_lsid = true;
    c->lsid = op->lsid_key;
    BSON_APPEND_DOCUMENT(c->session, "lsid", &op->lsid);
    if (op->has_txn_number) {
        BSON_APPEND_INT64(c->session, "txnNumber", op->txn_number);
    }
    if (op->has_autocommit) {
        BSON_APPEND_BOOL(c->session, "autocommit", op->autocommit);
    }
}

/* Replace the remote's batch with the array at 'key' of the reply's cursor document. */
static int
take_batch(shl_router_remote_t *rem, const bson_t *reply, const char *key, shl_status_t *st)
{
    bson_iter_t it, cur;
    bool have_id = false, have_batch = false;

    if (rem->batch != NULL) {
        bson_destroy(rem->batch);
        rem->batch = NULL;
    }
    rem->has_head = false;
    if (!bson_iter_init_find(&it, reply, "cursor") || !BSON_ITER_HOLDS_DOCUMENT(&it) ||
        !bson_iter_recurse(&it, &cur)) {
        return shl_status_set(st, SHL_CODE_FAILED_TO_PARSE,
                              "a shard's reply has no cursor document");
    }
    while (shl_iter_next(&cur)) {
        if (strcmp(shl_iter_key(&cur), "id") == 0 && BSON_ITER_HOLDS_NUMBER(&cur)) {
            rem->cursor_id = bson_iter_as_int64(&cur);
            have_id = true;
        } else if (strcmp(shl_iter_key(&cur), key) == 0 && BSON_ITER_HOLDS_ARRAY(&cur)) {
            const uint8_t *data;
            uint32_t len;
            bson_iter_array(&cur, &len, &data);
            rem->batch = bson_new_from_data(data, len);
            have_batch = true;
        }
    }
    if (!have_id || !have_batch) {
        rem->cursor_id = 0;
        return shl_status_set(st, SHL_CODE_FAILED_TO_PARSE, "a shard's cursor reply lacks id or %s",
                              key);
    }
    bson_iter_init(&rem->it, rem->batch);
    return 0;
}

int
shl_router_cursor_add_remote(shl_router_cursor_t *c, const char *shard, const bson_t *reply,
                             shl_status_t *st)
{
    shl_router_remote_t *rem;

    c->remotes = bson_realloc(c->remotes, (c->nremotes + 1) * sizeof(*c->remotes));
    rem = &c->remotes[c->nremotes++];
    memset(rem, 0, sizeof(*rem));
    shl_str_copy(rem->shard, sizeof(rem->shard), shard != NULL ? shard : "");
    return take_batch(rem, reply, "firstBatch", st);
}

void
shl_router_cursor_pin_last_remote(shl_router_cursor_t *c, const char *host)
{
    if (c->nremotes > 0) {
        shl_str_copy(c->remotes[c->nremotes - 1].host, sizeof(c->remotes[0].host), host);
    }
}

/* The host of a remote: the member that opened its cursor, else the shard's primary, or the
 * config server. */
static int
remote_host(shl_router_cursor_t *c, const shl_router_remote_t *rem, char *host, size_t n,
            shl_status_t *st)
{
    if (rem->host[0] != '\0') {
        shl_str_copy(host, n, rem->host);
        return 0;
    }
    if (rem->shard[0] == '\0') {
        shl_str_copy(host, n, shl_shard_registry_config_host(c->r->registry));
        return 0;
    }
    return shl_shard_registry_host_for(c->r->registry, rem->shard, host, n, st);
}

/* Load the next document of a remote's batch into its head; false when the batch is done. */
static bool
load_head(shl_router_remote_t *rem)
{
    if (rem->has_head) {
        return true;
    }
    if (rem->batch == NULL) {
        return false;
    }
    while (shl_iter_next(&rem->it)) {
        const uint8_t *data;
        uint32_t len;
        if (!BSON_ITER_HOLDS_DOCUMENT(&rem->it)) {
            continue;
        }
        bson_iter_document(&rem->it, &len, &data);
        if (bson_init_static(&rem->head, data, len)) {
            rem->has_head = true;
            return true;
        }
    }
    return false;
}

/* The getMore's wait for the shards ends when its operation is killed or times out. */
static int
cursor_op_interrupted(void *arg, shl_status_t *st)
{
    return shl_op_check_interrupt(arg, st);
}

/*
 * getMore on every remote in 'which' (indexes into c->remotes) at once. The first error is
 * returned; remotes that answered keep their new batches.
 */
static int
fetch_more(shl_router_cursor_t *c, const size_t *which, size_t n, shl_status_t *st)
{
    shl_fanout_req_t *reqs = bson_malloc0((n + 1) * sizeof(*reqs));
    shl_fanout_result_t *res = bson_malloc0((n + 1) * sizeof(*res));
    char(*hosts)[SHL_CLIENT_HOST_MAX] = bson_malloc0((n + 1) * sizeof(*hosts));
    bson_t *cmds = bson_aligned_alloc0(BSON_ALIGNOF(bson_t), (n + 1) * sizeof(bson_t));
    int64_t remaining = c->op != NULL ? shl_op_remaining_ms(c->op) : -1;
    shl_client_interrupt_t intr = {cursor_op_interrupted, c->op};
    size_t built = 0;
    int ret = 0;

    if (c->op != NULL) {
        SHL_ERR(shl_op_check_interrupt(c->op, st));
    }
    for (size_t i = 0; i < n; i++) {
        shl_router_remote_t *rem = &c->remotes[which[i]];
        SHL_ERR(remote_host(c, rem, hosts[i], sizeof(hosts[i]), st));
        bson_init(&cmds[i]);
        built++;
        BSON_APPEND_INT64(&cmds[i], "getMore", rem->cursor_id);
        BSON_APPEND_UTF8(&cmds[i], "collection", c->coll);
        if (c->fetch_batch > 0) {
            BSON_APPEND_INT64(&cmds[i], "batchSize", c->fetch_batch);
        }
        if (c->session != NULL) {
            bson_concat(&cmds[i], c->session);
        }
        reqs[i].host = hosts[i];
        reqs[i].db = c->db;
        reqs[i].cmd = &cmds[i];
    }
    /* A killOp of the getMore ends the wait for the shards (their cursors are killed with the
     * router's cursor, as the failed getMore ends it). */
    (void)shl_client_fanout_interruptible(c->r->pool, reqs, n,
                                          remaining < 0 ? 0 : (remaining == 0 ? 1 : remaining),
                                          c->op != NULL ? &intr : NULL, res);
    shl_router_deadline_results(c->op, res, n);
    for (size_t i = 0; i < n; i++) {
        shl_router_remote_t *rem = &c->remotes[which[i]];
        if (res[i].code != 0) {
            /* A failed getMore ends that remote cursor -- unless it was cut off by the
             * getMore's own interruption: then the shard's cursor lives on, and killing the
             * router's cursor sends it killCursors. */
            if (!res[i].interrupted) {
                rem->cursor_id = 0;
            }
            if (c->allow_partial && shl_router_partial_ok(res[i].code)) {
                c->partial = true;
                if (rem->batch != NULL) {
                    bson_destroy(rem->batch);
                    rem->batch = NULL;
                }
                rem->has_head = false;
                continue;
            }
            if (ret == 0) {
                *st = res[i].status;
                ret = res[i].code;
            }
            continue;
        }
        if (take_batch(rem, &res[i].reply, "nextBatch", ret == 0 ? st : NULL) != 0 && ret == 0) {
            ret = st->code;
        }
    }
    shl_fanout_results_cleanup(res, n);
done:
    for (size_t i = 0; i < built; i++) {
        bson_destroy(&cmds[i]);
    }
    bson_free(cmds);
    bson_free(hosts);
    bson_free(res);
    bson_free(reqs);
    return ret;
}

/*
 * The next merged remote document (borrowed until the next call), or NULL at the end:
 * by the sort pattern (every live remote must have a head to choose), else remote by remote.
 */
static int
merged_next(shl_router_cursor_t *c, const bson_t **doc, shl_status_t *st)
{
    size_t *need = bson_malloc0((c->nremotes + 1) * sizeof(size_t));
    int ret = 0;

    *doc = NULL;
    if (c->sort == NULL) {
        while (c->cur_remote < c->nremotes) {
            shl_router_remote_t *rem = &c->remotes[c->cur_remote];
            if (load_head(rem)) {
                rem->has_head = false; /* consumed; the view stays valid until the next fetch */
                *doc = &rem->head;
                goto done;
            }
            if (rem->cursor_id == 0) {
                c->cur_remote++;
                continue;
            }
            need[0] = c->cur_remote;
            SHL_ERR(fetch_more(c, need, 1, st));
        }
        goto done;
    }
    for (;;) {
        size_t nneed = 0, best = SIZE_MAX;
        for (size_t i = 0; i < c->nremotes; i++) {
            if (!load_head(&c->remotes[i]) && c->remotes[i].cursor_id != 0) {
                need[nneed++] = i;
            }
        }
        if (nneed > 0) {
            SHL_ERR(fetch_more(c, need, nneed, st));
            continue;
        }
        for (size_t i = 0; i < c->nremotes; i++) {
            if (c->remotes[i].has_head &&
                (best == SIZE_MAX ||
                 shl_sort_doc_compare(c->sort, &c->remotes[i].head, &c->remotes[best].head) < 0)) {
                best = i;
            }
        }
        if (best != SIZE_MAX) {
            c->remotes[best].has_head = false;
            *doc = &c->remotes[best].head;
        }
        goto done;
    }
done:
    bson_free(need);
    return ret;
}

static int
source_next(void *arg, const bson_t **doc, shl_status_t *st)
{
    return merged_next(arg, doc, st);
}

shl_pipeline_source_t
shl_router_cursor_source(shl_router_cursor_t *c)
{
    shl_pipeline_source_t s = {source_next, c};
    return s;
}

/* Turn a partial sum into the average: field / __shl_avgn_field (null when no numbers). */
static int
fixup_next(void *arg, const bson_t **doc, shl_status_t *st)
{
    shl_router_cursor_t *c = arg;
    const bson_t *in;
    bson_iter_t it, n_it;
    int ret = 0;

    *doc = NULL;
    SHL_ERR(shl_pipeline_next(c->merge_a, &in, st));
    if (in == NULL) {
        goto done;
    }
    bson_reinit(&c->fixed);
    bson_iter_init(&it, in);
    while (shl_iter_next(&it)) {
        const char *k = shl_iter_key(&it);
        bool is_avg = false;
        if (strncmp(k, "__shl_avgn_", 11) == 0) {
            continue;
        }
        for (size_t i = 0; c->fixup.fields != NULL && c->fixup.fields[i] != NULL; i++) {
            if (strcmp(c->fixup.fields[i], k) == 0) {
                is_avg = true;
                break;
            }
        }
        if (!is_avg) {
            bson_append_iter(&c->fixed, NULL, 0, &it);
            continue;
        }
        {
            char nname[SHL_NS_MAX + 16];
            int64_t n = 0;
            snprintf(nname, sizeof(nname), "__shl_avgn_%s", k);
            if (bson_iter_init_find(&n_it, in, nname) && BSON_ITER_HOLDS_NUMBER(&n_it)) {
                n = bson_iter_as_int64(&n_it);
            }
            if (n == 0 || !BSON_ITER_HOLDS_NUMBER(&it)) {
                bson_append_null(&c->fixed, k, -1);
            } else {
                double sum = BSON_ITER_HOLDS_DOUBLE(&it) ? bson_iter_double(&it)
                                                         : (double)bson_iter_as_int64(&it);
                bson_append_double(&c->fixed, k, -1, sum / (double)n);
            }
        }
    }
    *doc = &c->fixed;
done:
    return ret;
}

void
shl_router_cursor_set_merge(shl_router_cursor_t *c, shl_pipeline_t *a, shl_pipeline_t *b,
                            char **avg_fields)
{
    shl_pipeline_source_t src = shl_router_cursor_source(c);

    c->merge_a = a;
    shl_pipeline_set_source(a, &src);
    if (b != NULL) {
        shl_pipeline_source_t fix = {fixup_next, c};
        c->merge_b = b;
        c->fixup.fields = avg_fields;
        shl_pipeline_set_source(b, &fix);
    } else if (avg_fields != NULL) {
        bson_strfreev(avg_fields);
    }
}

/* The next output document of the cursor (borrowed until the next call), NULL at the end. */
static int
output_next(shl_router_cursor_t *c, const bson_t **doc, shl_status_t *st)
{
    int ret = 0;
    const bson_t *d = NULL;

    *doc = NULL;
    if (c->merge_b != NULL) {
        SHL_ERR(shl_pipeline_next(c->merge_b, doc, st));
        goto done;
    }
    if (c->merge_a != NULL) {
        SHL_ERR(shl_pipeline_next(c->merge_a, doc, st));
        goto done;
    }
    if (c->limit > 0 && c->n_returned >= c->limit) {
        goto done;
    }
    for (;;) {
        SHL_ERR(merged_next(c, &d, st));
        if (d == NULL || c->skip == 0) {
            break;
        }
        c->skip--;
    }
    if (d == NULL) {
        goto done;
    }
    if (c->proj != NULL) {
        shl_match_details_t details;
        bool matched = false;
        memset(&details, 0, sizeof(details));
        if (c->matcher != NULL) {
            SHL_ERR(shl_matcher_match(c->matcher, d, &details, &matched, st));
        }
        bson_destroy(&c->projected);
        SHL_ERR(shl_projection_apply(c->proj, d, &details, c->vars, &c->projected, st));
        if (c->keep_record_id) {
            /* MongoDB adds {$recordId: {$meta: "recordId"}} to the projection. */
            bson_iter_t rid, had;
            if (bson_iter_init_find(&rid, d, "$recordId") &&
                !bson_iter_init_find(&had, &c->projected, "$recordId")) {
                bson_append_iter(&c->projected, NULL, 0, &rid);
            }
        }
        d = &c->projected;
    }
    {
        /* The shards' text scores (the merge's sort key) are not for the client. */
        bson_t out;
        if (shl_text_score_strip(d, &out)) {
            bson_destroy(&c->projected);
            c->projected = out;
            d = &c->projected;
        }
    }
    c->n_returned++;
    *doc = d;
done:
    return ret;
}

int
shl_router_cursor_fill_batch(shl_op_ctx_t *op, shl_router_cursor_t *c, int64_t batch_size,
                             bool first, bson_t *arr, bool *exhausted, shl_status_t *st)
{
    int64_t n = 0;
    int ret = 0;

    c->op = op;
    *exhausted = false;
    /* A find asks the shards for what the user asked (plus what is still to be skipped), as
     * mongos does; a merge pipeline takes the shards' default batches. */
    c->fetch_batch = 0;
    if (c->merge_a == NULL && batch_size > 0 && batch_size < INT32_MAX - c->skip) {
        c->fetch_batch = batch_size + c->skip;
    }
    if (batch_size <= 0) {
        batch_size = first ? SHL_ROUTER_CURSOR_FIRST_BATCH : INT64_MAX;
    }
    while (n < batch_size) {
        const bson_t *d;
        char k[16];
        const char *kp;
        bson_t *owned = NULL;

        SHL_ERR(shl_op_check_interrupt(op, st));
        if (c->stash != NULL) {
            owned = c->stash;
            c->stash = NULL;
            d = owned;
        } else {
            SHL_ERR(output_next(c, &d, st));
        }
        if (d == NULL) {
            *exhausted = true;
            break;
        }
        /* The merge part may build a document no reply can carry (a shard's cannot: its
         * replies are checked). */
        if (shl_msg_reply_doc_check(d->len, st) != 0) {
            if (owned != NULL) {
                bson_destroy(owned);
            }
            SHL_ERR(st->code);
        }
        if (!shl_bson_array_has_room(arr, (uint32_t)n, d->len, SHL_ROUTER_CURSOR_MAX_BATCH_BYTES)) {
            c->stash = owned != NULL ? owned : bson_copy(d);
            break;
        }
        bson_uint32_to_string((uint32_t)n, &kp, k, sizeof(k));
        bson_append_document(arr, kp, -1, d);
        if (owned != NULL) {
            bson_destroy(owned);
        }
        n++;
    }
    /* Without a pipeline, a reached limit or drained remotes end the cursor now. */
    if (!*exhausted && c->stash == NULL && c->merge_a == NULL) {
        bool live = false;
        for (size_t i = 0; i < c->nremotes; i++) {
            shl_router_remote_t *rem = &c->remotes[i];
            if (rem->cursor_id != 0 || load_head(rem)) {
                live = true;
            }
        }
        if (!live || (c->limit > 0 && c->n_returned >= c->limit)) {
            *exhausted = true;
        }
    }
done:
    c->op = NULL;
    return ret;
}

/* killCursors on the 'open' remotes still open (best effort). */
static void
kill_open_remotes(shl_router_cursor_t *c, size_t open)
{
    size_t n = 0;
    shl_fanout_req_t *reqs = bson_malloc0((open + 1) * sizeof(*reqs));
    shl_fanout_result_t *res = bson_malloc0((open + 1) * sizeof(*res));
    char(*hosts)[SHL_CLIENT_HOST_MAX] = bson_malloc0((open + 1) * sizeof(*hosts));
    bson_t *cmds = bson_aligned_alloc0(BSON_ALIGNOF(bson_t), (open + 1) * sizeof(bson_t));
    shl_status_t st;

    for (size_t i = 0; i < c->nremotes; i++) {
        shl_router_remote_t *rem = &c->remotes[i];
        bson_t ids;
        if (rem->cursor_id == 0 || remote_host(c, rem, hosts[n], sizeof(hosts[n]), &st) != 0) {
            continue;
        }
        bson_init(&cmds[n]);
        BSON_APPEND_UTF8(&cmds[n], "killCursors", c->coll);
        BSON_APPEND_ARRAY_BEGIN(&cmds[n], "cursors", &ids);
        BSON_APPEND_INT64(&ids, "0", rem->cursor_id);
        bson_append_array_end(&cmds[n], &ids);
        if (c->session != NULL) {
            bson_concat(&cmds[n], c->session);
        }
        reqs[n].host = hosts[n];
        reqs[n].db = c->db;
        reqs[n].cmd = &cmds[n];
        rem->cursor_id = 0;
        n++;
    }
    if (n > 0) {
        shl_client_fanout(c->r->pool, reqs, n, KILL_TIMEOUT_MS, res);
        shl_fanout_results_cleanup(res, n);
    }
    for (size_t i = 0; i < n; i++) {
        bson_destroy(&cmds[i]);
    }
    bson_free(cmds);
    bson_free(hosts);
    bson_free(res);
    bson_free(reqs);
}

static void
kill_remotes(shl_router_cursor_t *c)
{
    size_t open = 0;
    for (size_t i = 0; i < c->nremotes; i++) {
        open += c->remotes[i].cursor_id != 0;
    }
    /* Usually every shard's cursor is exhausted and there is nothing to send. */
    if (open > 0) {
        kill_open_remotes(c, open);
    }
}

static void
cursor_free(shl_router_cursor_t *c)
{
    for (size_t i = 0; i < c->nremotes; i++) {
        if (c->remotes[i].batch != NULL) {
            bson_destroy(c->remotes[i].batch);
        }
    }
    bson_free(c->remotes);
    if (c->sort != NULL) {
        shl_sort_pattern_destroy(c->sort);
    }
    shl_projection_destroy(c->proj);
    shl_matcher_destroy(c->matcher);
    shl_pipeline_destroy(c->merge_b);
    shl_pipeline_destroy(c->merge_a);
    if (c->fixup.fields != NULL) {
        bson_strfreev(c->fixup.fields);
    }
    if (c->env_state != NULL) {
        c->env_state_free(c->env_state);
    }
    if (c->stash != NULL) {
        bson_destroy(c->stash);
    }
    bson_destroy(&c->projected);
    bson_destroy(&c->fixed);
    if (c->vars != NULL) {
        bson_destroy(c->vars);
    }
    shl_collator_release(c->collator); /* after the pipelines that borrow it */
    if (c->session != NULL) {
        bson_destroy(c->session);
    }
    bson_free(c);
}

void
shl_router_cursor_destroy(shl_router_cursor_t *c)
{
    if (c == NULL) {
        return;
    }
    kill_remotes(c);
    cursor_free(c);
}

void
shl_router_cursor_reply(bson_t *reply, const char *ns, int64_t id, bool first, const bson_t *arr,
                        bool partial)
{
    shl_router_cursor_reply_at(reply, ns, id, first, arr, partial, 0);
}

void
shl_router_cursor_reply_at(bson_t *reply, const char *ns, int64_t id, bool first,
                           const bson_t *arr, bool partial, uint64_t at)
{
    bson_t cur;

    BSON_APPEND_DOCUMENT_BEGIN(reply, "cursor", &cur);
    BSON_APPEND_ARRAY(&cur, first ? "firstBatch" : "nextBatch", arr);
    BSON_APPEND_INT64(&cur, "id", id);
    BSON_APPEND_UTF8(&cur, "ns", ns);
    if (partial) {
        BSON_APPEND_BOOL(&cur, "partialResultsReturned", true);
    }
    if (at != 0) {
        bson_append_timestamp(&cur, "atClusterTime", -1, (uint32_t)(at >> 32),
                              (uint32_t)(at & 0xffffffffu));
    }
    bson_append_document_end(reply, &cur);
}

bool
shl_router_partial_ok(int code)
{
    return code == SHL_CODE_SHARD_NOT_FOUND ||
           shl_code_in_category(code, SHL_CAT_NETWORK_ERROR | SHL_CAT_NETWORK_TIMEOUT_ERROR |
                                          SHL_CAT_RETRIABLE_ERROR |
                                          SHL_CAT_EXCEEDED_TIME_LIMIT_ERROR);
}

/* ---------------------------------------------------------------- manager */

struct shl_router_cursor_manager {
    pthread_mutex_t lock;
    shl_router_cursor_t *head; /* guarded by lock */
    int64_t count;             /* guarded by lock */
    pthread_t reaper;
    pthread_mutex_t reaper_lock;
    pthread_cond_t reaper_cond;
    bool reaper_stop; /* guarded by reaper_lock */
};

static void *
reaper_main(void *arg)
{
    shl_router_cursor_manager_t *mgr = arg;

    shl_log_set_thread_ctx("clientcursormon");
    pthread_mutex_lock(&mgr->reaper_lock);
    while (!mgr->reaper_stop) {
        struct timespec ts;
        int n;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += REAPER_PERIOD_MS / 1000;
        pthread_cond_timedwait(&mgr->reaper_cond, &mgr->reaper_lock, &ts);
        if (mgr->reaper_stop) {
            break;
        }
        pthread_mutex_unlock(&mgr->reaper_lock);
        n = shl_router_cursor_manager_reap(mgr, shl_clock_wall_ms(),
                                           shl_opt_int(SHL_OPT_cursorTimeoutMillis));
        if (n > 0) {
            SHL_LOG_INFO(QUERY, 4620101, "Cursors timed out", "count", BCON_INT32(n));
        }
        pthread_mutex_lock(&mgr->reaper_lock);
    }
    pthread_mutex_unlock(&mgr->reaper_lock);
    return NULL;
}

shl_router_cursor_manager_t *
shl_router_cursor_manager_new(void)
{
    shl_router_cursor_manager_t *mgr = bson_malloc0(sizeof(*mgr));

    pthread_mutex_init(&mgr->lock, NULL);
    pthread_mutex_init(&mgr->reaper_lock, NULL);
    pthread_cond_init(&mgr->reaper_cond, NULL);
    SHL_INVARIANT(pthread_create(&mgr->reaper, NULL, reaper_main, mgr) == 0);
    return mgr;
}

void
shl_router_cursor_manager_destroy(shl_router_cursor_manager_t *mgr)
{
    if (mgr == NULL) {
        return;
    }
    pthread_mutex_lock(&mgr->reaper_lock);
    mgr->reaper_stop = true;
    pthread_cond_signal(&mgr->reaper_cond);
    pthread_mutex_unlock(&mgr->reaper_lock);
    pthread_join(mgr->reaper, NULL);
    while (mgr->head != NULL) {
        shl_router_cursor_t *next = mgr->head->next;
        cursor_free(mgr->head);
        mgr->head = next;
    }
    pthread_cond_destroy(&mgr->reaper_cond);
    pthread_mutex_destroy(&mgr->reaper_lock);
    pthread_mutex_destroy(&mgr->lock);
    bson_free(mgr);
}

static int64_t
random_id(void)
{
    uint64_t v = 0;
    while (v == 0) {
        if (getrandom(&v, sizeof(v), 0) != (ssize_t)sizeof(v)) {
            v = (uint64_t)shl_clock_mono_us() * 6364136223846793005ull + 1442695040888963407ull;
        }
        v &= 0x7FFFFFFFFFFFFFFFull; /* positive, as drivers expect */
    }
    return (int64_t)v;
}

static shl_router_cursor_t **
find_slot(shl_router_cursor_manager_t *mgr, int64_t id)
{
    shl_router_cursor_t **p = &mgr->head;
    while (*p != NULL && (*p)->id != id) {
        p = &(*p)->next;
    }
    return p;
}

bool
shl_router_cursor_manager_owner(shl_router_cursor_manager_t *mgr, int64_t id, const char *ns,
                                uint8_t out[SHL_LSID_UID_LEN])
{
    shl_router_cursor_t *c;
    bool found;

    pthread_mutex_lock(&mgr->lock);
    c = *find_slot(mgr, id);
    found = c != NULL && !c->kill_pending && strcmp(c->ns, ns) == 0;
    if (found) {
        memcpy(out, c->owner, SHL_LSID_UID_LEN);
    }
    pthread_mutex_unlock(&mgr->lock);
    return found;
}

int64_t
shl_router_cursor_manager_register(shl_router_cursor_manager_t *mgr, shl_router_cursor_t *c)
{
    pthread_mutex_lock(&mgr->lock);
    do {
        c->id = random_id();
    } while (*find_slot(mgr, c->id) != NULL);
    c->pinned = false;
    c->last_used_ms = shl_clock_wall_ms();
    c->next = mgr->head;
    mgr->head = c;
    mgr->count++;
    pthread_mutex_unlock(&mgr->lock);
    return c->id;
}

int
shl_router_cursor_manager_pin(shl_router_cursor_manager_t *mgr, int64_t id, const char *ns,
                              shl_router_cursor_t **out, shl_status_t *st)
{
    shl_router_cursor_t *c;
    int ret = 0;

    *out = NULL;
    pthread_mutex_lock(&mgr->lock);
    c = *find_slot(mgr, id);
    if (c == NULL || c->kill_pending) {
        SHL_FAIL(st, SHL_CODE_CURSOR_NOT_FOUND, "cursor id %lld not found", (long long)id);
    }
    if (strcmp(c->ns, ns) != 0) {
        SHL_FAIL(st, SHL_CODE_UNAUTHORIZED,
                 "Requested getMore on namespace '%s', but cursor belongs to a different "
                 "namespace %s",
                 ns, c->ns);
    }
    if (c->pinned) {
        SHL_FAIL(st, SHL_CODE_CURSOR_IN_USE, "Cursor already in use (namespace: '%s', id: %lld).",
                 c->ns, (long long)id);
    }
    c->pinned = true;
    *out = c;
done:
    pthread_mutex_unlock(&mgr->lock);
    return ret;
}

void
shl_router_cursor_manager_unpin(shl_router_cursor_manager_t *mgr, shl_router_cursor_t *c,
                                bool destroy)
{
    pthread_mutex_lock(&mgr->lock);
    c->pinned = false;
    c->last_used_ms = shl_clock_wall_ms();
    if (destroy || c->kill_pending) {
        shl_router_cursor_t **p = find_slot(mgr, c->id);
        if (*p == c) {
            *p = c->next;
            mgr->count--;
        }
        destroy = true;
    }
    pthread_mutex_unlock(&mgr->lock);
    if (destroy) {
        shl_router_cursor_destroy(c);
    }
}

bool
shl_router_cursor_manager_kill(shl_router_cursor_manager_t *mgr, int64_t id, const char *ns)
{
    shl_router_cursor_t *c, **p, *victim = NULL;
    bool found = false;

    pthread_mutex_lock(&mgr->lock);
    p = find_slot(mgr, id);
    c = *p;
    if (c != NULL && !c->kill_pending && (ns == NULL || strcmp(c->ns, ns) == 0)) {
        found = true;
        if (c->pinned) {
            c->kill_pending = true;
        } else {
            *p = c->next;
            mgr->count--;
            victim = c;
        }
    }
    pthread_mutex_unlock(&mgr->lock);
    /* The remote cursors are killed outside the lock: it is network I/O. */
    shl_router_cursor_destroy(victim);
    return found;
}

int
shl_router_cursor_manager_kill_sessions(shl_router_cursor_manager_t *mgr,
                                        bool (*match)(void *arg, const shl_lsid_t *lsid), void *arg)
{
    shl_router_cursor_t *victims = NULL, **p;
    int n = 0;

    pthread_mutex_lock(&mgr->lock);
    p = &mgr->head;
    while (*p != NULL) {
        shl_router_cursor_t *c = *p;
        if (!c->has_lsid || c->kill_pending || !match(arg, &c->lsid)) {
            p = &c->next;
            continue;
        }
        n++;
        if (c->pinned) {
            c->kill_pending = true;
            p = &c->next;
        } else {
            *p = c->next;
            mgr->count--;
            c->next = victims;
            victims = c;
        }
    }
    pthread_mutex_unlock(&mgr->lock);
    /* The remote cursors are killed outside the lock: it is network I/O. */
    while (victims != NULL) {
        shl_router_cursor_t *next = victims->next;
        shl_router_cursor_destroy(victims);
        victims = next;
    }
    return n;
}

void
shl_router_cursor_manager_sessions(shl_router_cursor_manager_t *mgr,
                                   void (*fn)(void *arg, const shl_lsid_t *lsid), void *arg)
{
    pthread_mutex_lock(&mgr->lock);
    for (shl_router_cursor_t *c = mgr->head; c != NULL; c = c->next) {
        if (c->has_lsid) {
            fn(arg, &c->lsid);
        }
    }
    pthread_mutex_unlock(&mgr->lock);
}

int
shl_router_cursor_manager_reap(shl_router_cursor_manager_t *mgr, int64_t now_ms, int64_t timeout_ms)
{
    shl_router_cursor_t *victims = NULL, **p;
    int n = 0;

    pthread_mutex_lock(&mgr->lock);
    p = &mgr->head;
    while (*p != NULL) {
        shl_router_cursor_t *c = *p;
        if (!c->pinned && !c->no_timeout && now_ms - c->last_used_ms > timeout_ms) {
            *p = c->next;
            mgr->count--;
            c->next = victims;
            victims = c;
            n++;
        } else {
            p = &c->next;
        }
    }
    pthread_mutex_unlock(&mgr->lock);
    while (victims != NULL) {
        shl_router_cursor_t *next = victims->next;
        shl_router_cursor_destroy(victims);
        victims = next;
    }
    return n;
}

int64_t
shl_router_cursor_manager_count(shl_router_cursor_manager_t *mgr)
{
    int64_t n;
    pthread_mutex_lock(&mgr->lock);
    n = mgr->count;
    pthread_mutex_unlock(&mgr->lock);
    return n;
}
