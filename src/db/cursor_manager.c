/*
 * cursor_manager.c -- see cursor_manager.h. Cursors live in a hash table keyed by id
 * under one mutex; the mutex is never held while a source produces documents.
 */
#include "db/cursor_manager.h"

#include <pthread.h>
#include <string.h>
#include <sys/random.h>

#include "base/clock.h"
#include "bson/bson_util.h"
#include "net/message.h"

#define BUCKETS 1024

struct shl_cursor_manager {
    pthread_mutex_t lock;           /* guards buckets, count, and cursors' pinned/kill/last_used */
    shl_cursor_t *buckets[BUCKETS]; /* guarded by lock */
    int64_t count;                  /* guarded by lock */
};

shl_cursor_manager_t *
shl_cursor_manager_new(void)
{
    shl_cursor_manager_t *mgr = bson_malloc0(sizeof(*mgr));
    pthread_mutex_init(&mgr->lock, NULL);
    return mgr;
}

shl_cursor_t *
shl_cursor_new(const char *ns, const shl_cursor_source_ops_t *ops, void *state)
{
    shl_cursor_t *c = bson_malloc0(sizeof(*c));
    snprintf(c->ns, sizeof(c->ns), "%s", ns);
    c->ops = ops;
    c->state = state;
    return c;
}

void
shl_cursor_destroy(shl_cursor_t *c)
{
    if (c == NULL) {
        return;
    }
    if (c->ops != NULL && c->ops->destroy != NULL) {
        c->ops->destroy(c->state);
    }
    if (c->stash != NULL) {
        bson_destroy(c->stash);
    }
    bson_free(c);
}

void
shl_cursor_manager_destroy(shl_cursor_manager_t *mgr)
{
    for (int i = 0; i < BUCKETS; i++) {
        shl_cursor_t *c = mgr->buckets[i];
        while (c != NULL) {
            shl_cursor_t *next = c->next;
            shl_cursor_destroy(c);
            c = next;
        }
    }
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
        v &= 0x7FFFFFFFFFFFFFFFull; /* positive, as MongoDB's cursor ids look to drivers */
    }
    return (int64_t)v;
}

static shl_cursor_t **
find_slot(shl_cursor_manager_t *mgr, int64_t id)
{
    shl_cursor_t **p = &mgr->buckets[(uint64_t)id % BUCKETS];
    while (*p != NULL && (*p)->id != id) {
        p = &(*p)->next;
    }
    return p;
}

int64_t
shl_cursor_manager_register(shl_cursor_manager_t *mgr, shl_cursor_t *c, const shl_op_ctx_t *op)
{
    if (op != NULL) {
        shl_op_user_digest(op, c->owner);
    } else {
        shl_lsid_user_digest("", c->owner);
    }
    if (op != NULL && op->has_lsid) {
        c->has_lsid = true;
        c->lsid = op->lsid_key;
        c->in_txn = op->txn != NULL;
        c->txn_number = op->txn_number;
    }
    pthread_mutex_lock(&mgr->lock);
    do {
        c->id = random_id();
    } while (*find_slot(mgr, c->id) != NULL);
    c->pinned = false;
    c->last_used_ms = shl_clock_wall_ms();
    c->next = mgr->buckets[(uint64_t)c->id % BUCKETS];
    mgr->buckets[(uint64_t)c->id % BUCKETS] = c;
    mgr->count++;
    pthread_mutex_unlock(&mgr->lock);
    return c->id;
}

int
shl_cursor_manager_pin(shl_cursor_manager_t *mgr, int64_t id, const char *ns, shl_cursor_t **out,
                       shl_status_t *st)
{
    int ret = 0;
    shl_cursor_t *c;

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

static void
unlink_locked(shl_cursor_manager_t *mgr, shl_cursor_t *c)
{
    shl_cursor_t **p = find_slot(mgr, c->id);
    if (*p == c) {
        *p = c->next;
        mgr->count--;
    }
}

void
shl_cursor_manager_unpin(shl_cursor_manager_t *mgr, shl_cursor_t *c, bool destroy)
{
    pthread_mutex_lock(&mgr->lock);
    c->pinned = false;
    c->last_used_ms = shl_clock_wall_ms();
    destroy = destroy || c->kill_pending;
    if (destroy) {
        unlink_locked(mgr, c);
    }
    pthread_mutex_unlock(&mgr->lock);
    if (destroy) {
        shl_cursor_destroy(c);
    }
}

bool
shl_cursor_manager_owner(shl_cursor_manager_t *mgr, int64_t id, const char *ns,
                         uint8_t out[SHL_LSID_UID_LEN])
{
    shl_cursor_t *c;
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

shl_cursor_kill_result_t
shl_cursor_manager_kill(shl_cursor_manager_t *mgr, int64_t id, const char *ns)
{
    shl_cursor_t *c, *victim = NULL;
    shl_cursor_kill_result_t res = SHL_CURSOR_NOT_FOUND;

    pthread_mutex_lock(&mgr->lock);
    c = *find_slot(mgr, id);
    if (c != NULL && !c->kill_pending && strcmp(c->ns, ns) == 0) {
        res = SHL_CURSOR_KILLED;
        if (c->pinned) {
            c->kill_pending = true;
        } else {
            unlink_locked(mgr, c);
            victim = c;
        }
    }
    pthread_mutex_unlock(&mgr->lock);
    shl_cursor_destroy(victim);
    return res;
}

/* Detach every unpinned cursor matching 'pred' into a list, mark pinned ones. */
static int
kill_matching(shl_cursor_manager_t *mgr, bool (*pred)(const shl_cursor_t *, const void *),
              const void *arg)
{
    shl_cursor_t *victims = NULL;
    int n = 0;

    pthread_mutex_lock(&mgr->lock);
    for (int i = 0; i < BUCKETS; i++) {
        shl_cursor_t **p = &mgr->buckets[i];
        while (*p != NULL) {
            shl_cursor_t *c = *p;
            if (!pred(c, arg)) {
                p = &c->next;
            } else if (c->pinned) {
                c->kill_pending = true;
                p = &c->next;
            } else {
                *p = c->next;
                mgr->count--;
                c->next = victims;
                victims = c;
                n++;
            }
        }
    }
    pthread_mutex_unlock(&mgr->lock);
    while (victims != NULL) {
        shl_cursor_t *next = victims->next;
        shl_cursor_destroy(victims);
        victims = next;
    }
    return n;
}

typedef struct reap_arg {
    int64_t now_ms;
    int64_t timeout_ms;
} reap_arg_t;

static bool
is_idle(const shl_cursor_t *c, const void *arg)
{
    const reap_arg_t *r = arg;
    return !c->no_timeout && !c->in_txn && r->now_ms - c->last_used_ms > r->timeout_ms;
}

int
shl_cursor_manager_reap(shl_cursor_manager_t *mgr, int64_t now_ms, int64_t timeout_ms)
{
    reap_arg_t r = {now_ms, timeout_ms};
    return kill_matching(mgr, is_idle, &r);
}

static bool
on_ns(const shl_cursor_t *c, const void *arg)
{
    return !c->outlives_namespace && strcmp(c->ns, (const char *)arg) == 0;
}

int
shl_cursor_manager_kill_ns(shl_cursor_manager_t *mgr, const char *ns)
{
    return kill_matching(mgr, on_ns, ns);
}

static bool
in_db(const shl_cursor_t *c, const void *arg)
{
    const char *db = arg;
    size_t n = strlen(db);
    return !c->outlives_namespace && strncmp(c->ns, db, n) == 0 && c->ns[n] == '.';
}

int
shl_cursor_manager_kill_db(shl_cursor_manager_t *mgr, const char *db)
{
    return kill_matching(mgr, in_db, db);
}

/* A session matcher and its argument (shl_cursor_manager_kill_sessions). */
typedef struct session_pred {
    bool (*match)(void *arg, const shl_lsid_t *lsid);
    void *arg;
} session_pred_t;

static bool
in_session(const shl_cursor_t *c, const void *arg)
{
    const session_pred_t *p = arg;
    /* A transaction's cursors read in its storage transaction, which the operation that has
     * the session may be using: they die with the transaction (its abort kills them). */
    return c->has_lsid && !c->in_txn && p->match(p->arg, &c->lsid);
}

int
shl_cursor_manager_kill_sessions(shl_cursor_manager_t *mgr,
                                 bool (*match)(void *arg, const shl_lsid_t *lsid), void *arg)
{
    session_pred_t p = {match, arg};
    return kill_matching(mgr, in_session, &p);
}

typedef struct txn_pred {
    const shl_lsid_t *lsid;
    int64_t txn_number;
} txn_pred_t;

static bool
in_txn(const shl_cursor_t *c, const void *arg)
{
    const txn_pred_t *p = arg;
    return c->in_txn && c->txn_number == p->txn_number && shl_lsid_equal(&c->lsid, p->lsid);
}

int
shl_cursor_manager_kill_txn(shl_cursor_manager_t *mgr, const shl_lsid_t *lsid, int64_t txn_number)
{
    txn_pred_t p = {lsid, txn_number};
    return kill_matching(mgr, in_txn, &p);
}

void
shl_cursor_manager_sessions(shl_cursor_manager_t *mgr,
                            void (*fn)(void *arg, const shl_lsid_t *lsid), void *arg)
{
    pthread_mutex_lock(&mgr->lock);
    for (int i = 0; i < BUCKETS; i++) {
        for (shl_cursor_t *c = mgr->buckets[i]; c != NULL; c = c->next) {
            if (c->has_lsid) {
                fn(arg, &c->lsid);
            }
        }
    }
    pthread_mutex_unlock(&mgr->lock);
}

int64_t
shl_cursor_manager_count(shl_cursor_manager_t *mgr)
{
    int64_t n;
    pthread_mutex_lock(&mgr->lock);
    n = mgr->count;
    pthread_mutex_unlock(&mgr->lock);
    return n;
}

int
shl_cursor_fill_batch(shl_op_ctx_t *op, shl_cursor_t *c, int64_t batch_size, bool first,
                      bson_t *arr, bool *exhausted, shl_status_t *st)
{
    int ret = 0;
    int64_t limit = batch_size > 0 ? batch_size : (first ? SHL_CURSOR_DEFAULT_FIRST_BATCH : -1);
    int64_t n = 0;
    char key[16];
    const char *k;

    *exhausted = false;
    while (limit < 0 || n < limit) {
        const bson_t *doc = NULL;

        if (c->limit > 0 && c->n_returned + n >= c->limit) {
            *exhausted = true;
            break;
        }
        SHL_ERR(shl_op_check_interrupt(op, st));
        if (c->stash != NULL) {
            doc = c->stash;
        } else {
            SHL_ERR(c->ops->next(c->state, op, &doc, st));
        }
        if (doc == NULL) {
            *exhausted = true;
            break;
        }
        /* A pipeline may build a document no reply can carry: it fails here, where MongoDB's
         * fails to serialise it, instead of going out in a reply the router refuses. */
        SHL_ERR(shl_msg_reply_doc_check(doc->len, st));
        /* The batch counts what the reply carries (each document with its array key), so
         * the reply stays within the internal limit with room for its envelope; a lone
         * oversized document still goes out alone. */
        if (!shl_bson_array_has_room(arr, (uint32_t)n, doc->len, SHL_CURSOR_MAX_BATCH_BYTES)) {
            if (c->stash == NULL) {
                c->stash = bson_copy(doc);
            }
            break;
        }
        bson_uint32_to_string((uint32_t)n, &k, key, sizeof(key));
        bson_append_document(arr, k, -1, doc);
        n++;
        if (c->stash != NULL) {
            bson_destroy(c->stash);
            c->stash = NULL;
        }
    }
    /* A batch that ends exactly at the cursor's limit ends the cursor too (MongoDB does
     * not leave such a cursor open for an empty getMore). */
    if (c->limit > 0 && c->n_returned + n >= c->limit) {
        *exhausted = true;
    }
done:
    c->n_returned += n;
    return ret;
}

void
shl_cursor_reply(bson_t *reply, const char *ns, int64_t id, bool first, const bson_t *arr)
{
    shl_cursor_reply_at(reply, ns, id, first, arr, 0);
}

void
shl_cursor_reply_at(bson_t *reply, const char *ns, int64_t id, bool first, const bson_t *arr,
                    uint64_t at)
{
    bson_t cur;
    BSON_APPEND_DOCUMENT_BEGIN(reply, "cursor", &cur);
    BSON_APPEND_ARRAY(&cur, first ? "firstBatch" : "nextBatch", arr);
    BSON_APPEND_INT64(&cur, "id", id);
    BSON_APPEND_UTF8(&cur, "ns", ns);
    if (at != 0) {
        bson_append_timestamp(&cur, "atClusterTime", -1, (uint32_t)(at >> 32),
                              (uint32_t)(at & 0xffffffffu));
    }
    bson_append_document_end(reply, &cur);
}
