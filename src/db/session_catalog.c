/*
 * session_catalog.c -- a data node's session catalog and retryable-write state
 * (session_catalog.h; seeds/001 "The logical session catalog", "Retryable writes").
 */
#include "db/session_catalog.h"
#include "db/txn_participant.h"

#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "base/clock.h"
#include "base/log.h"
#include "bson/bson_iter.h"
#include "bson/bson_util.h"
#include "storage/catalog.h"
#include "storage/index.h"
#include "storage/oplog.h"
#include "storage/record_store.h"

/* How long a waiting checkout sleeps between looks at its operation's kill flag. */
#define CHECKOUT_SLICE_MS 100

/* stmtId -> oplog timestamp of the statements of the session's current retryable write
 * (open addressing; 0 is never a timestamp, so ts 0 marks a free slot). */
typedef struct stmt_map {
    int32_t *ids;
    uint64_t *ts;
    size_t cap, n; /* cap is 0 or a power of two */
} stmt_map_t;

/* A statement of a parent's retryable write that a committed child transaction ran. */
typedef struct child_answer {
    int32_t stmt_id;
    uint64_t ts;    /* the child's commit entry */
    bson_t *answer; /* db_session_child_commit's */
} child_answer_t;

/* The largest lsid document (a child's {id, uid, txnNumber, txnUUID}: 121 bytes) and the
 * largest document a write lays out from it (oplog fields: 234 bytes). */
#define DB_LSID_DOC_MAX 160
#define DB_WRITE_DOC_MAX 320

struct db_session {
    shl_lsid_t lsid;
    db_session_catalog_t *cat;
    struct db_session *next; /* hash chain; guarded by the catalog's mu */

    /* Checkout state, guarded by the catalog's mu. */
    bool checked_out;
    int waiters;

    /* Retryable-write state: only the operation that has the session checked out reads or
     * writes these (so no lock). */
    bool loaded;
    int64_t txn_number;     /* -1: none yet */
    uint64_t last_write_ts; /* the newest entry of txn_number: the next prevOpTime */
    bool incomplete;        /* some of txn_number's history is missing */
    stmt_map_t stmts;
    int64_t record_rid; /* the RecordId of its config.transactions document, 0: unknown */
    /* A retryable write's oplog fields and config.transactions document are laid out by hand
     * in these buffers (no allocation per write; views in oplog_fields and record), from the
     * session's lsid document made once. Used by the operation that has the session checked
     * out, through its recorder. */
    uint8_t lsid_doc[DB_LSID_DOC_MAX];
    uint32_t lsid_doc_len;
    uint8_t fields_buf[DB_WRITE_DOC_MAX], record_buf[DB_WRITE_DOC_MAX];
    bson_t oplog_fields, record;

    /* The session's multi-document transaction (txn_participant.c), or NULL: touched only by
     * the operation that has the session checked out. */
    void *txn;

    /* Its retryable internal transactions (child sessions {id, uid, txnNumber, txnUUID};
     * seeds/000 "Retryable Internal Transactions"), guarded by the catalog's mu: the newest
     * retryable write number the session or a child of it started (-1: none), and what the
     * statements of that write which committed children ran are to answer to a retry. */
    int64_t child_txn_number;
    int prepared_children; /* its children's prepared transactions (guarded by the catalog's
                              mu; the catalog's cv is broadcast when one ends) */
    /* Its children's open transactions (in progress or prepared) for child_txn_number
     * (guarded by the catalog's mu; the catalog's cv is broadcast when one ends). */
    int open_children;
    /* The write (a child_txn_number) for which a retry already aborted another open attempt
     * (db_session_child_conflict_claim), -1: none (guarded by the catalog's mu). */
    int64_t conflict_aborted_txn;
    /* The txnNumber of its own transaction while that is prepared, -1: none (guarded by the
     * catalog's mu; the catalog's cv is broadcast when it leaves the prepared state). */
    int64_t prepared_txn;
    child_answer_t *answers;
    size_t nanswers, capanswers;
};

struct db_session_catalog {
    shl_storage_engine_t *eng;
    /* serverStatus counters (atomics). */
    atomic_llong retried_commands, retried_statements, transactions_writes;
    pthread_mutex_t mu; /* guards the table and every session's checkout state */
    pthread_cond_t cv;  /* a session was checked in */
    db_session_t **buckets;
    size_t nbuckets, count;
};

/* ---------------------------------------------------------------- statement map */

static uint64_t
stmt_hash(int32_t id)
{
    return (uint64_t)(uint32_t)id * 0x9E3779B97F4A7C15ULL;
}

static void stmt_map_put(stmt_map_t *m, int32_t id, uint64_t ts);
static void stmt_map_clear(stmt_map_t *m);

static void
stmt_map_grow(stmt_map_t *m)
{
    stmt_map_t old = *m;

    m->cap = old.cap != 0 ? old.cap * 2 : 16;
    m->n = 0;
    m->ids = bson_malloc0(m->cap * sizeof(*m->ids));
    m->ts = bson_malloc0(m->cap * sizeof(*m->ts));
    for (size_t i = 0; i < old.cap; i++) {
        if (old.ts[i] != 0) {
            stmt_map_put(m, old.ids[i], old.ts[i]);
        }
    }
    bson_free(old.ids);
    bson_free(old.ts);
}

static void
stmt_map_put(stmt_map_t *m, int32_t id, uint64_t ts)
{
    size_t i;

    if ((m->n + 1) * 2 > m->cap) {
        stmt_map_grow(m);
    }
    i = stmt_hash(id) & (m->cap - 1);
    while (m->ts[i] != 0 && m->ids[i] != id) {
        i = (i + 1) & (m->cap - 1);
    }
    if (m->ts[i] == 0) {
        m->n++;
    }
    m->ids[i] = id;
    m->ts[i] = ts;
}

static uint64_t
stmt_map_get(const stmt_map_t *m, int32_t id)
{
    size_t i;

    if (m->cap == 0) {
        return 0;
    }
    i = stmt_hash(id) & (m->cap - 1);
    while (m->ts[i] != 0) {
        if (m->ids[i] == id) {
            return m->ts[i];
        }
        i = (i + 1) & (m->cap - 1);
    }
    return 0;
}

/* Empty the map, keeping its arrays when small (a session starts a new retryable write with
 * each of its writes: no allocation then). */
static void
stmt_map_reset(stmt_map_t *m)
{
    if (m->cap > 64) {
        stmt_map_clear(m);
        return;
    }
    if (m->n != 0) {
        memset(m->ts, 0, m->cap * sizeof(*m->ts));
        m->n = 0;
    }
}

static void
stmt_map_clear(stmt_map_t *m)
{
    bson_free(m->ids);
    bson_free(m->ts);
    memset(m, 0, sizeof(*m));
}

/* ---------------------------------------------------------------- catalog */

db_session_catalog_t *
db_session_catalog_new(shl_storage_engine_t *eng)
{
    db_session_catalog_t *cat = bson_malloc0(sizeof(*cat));

    cat->eng = eng;
    pthread_mutex_init(&cat->mu, NULL);
    pthread_cond_init(&cat->cv, NULL);
    cat->nbuckets = 1024;
    cat->buckets = bson_malloc0(cat->nbuckets * sizeof(*cat->buckets));
    return cat;
}

static void
answers_clear(db_session_t *s)
{
    for (size_t i = 0; i < s->nanswers; i++) {
        bson_destroy(s->answers[i].answer);
    }
    s->nanswers = 0;
}

static void
session_free(db_session_t *s)
{
    answers_clear(s);
    bson_free(s->answers);
    db_txn_free(s->txn);
    stmt_map_clear(&s->stmts);
    bson_free(s);
}

void
db_session_catalog_destroy(db_session_catalog_t *cat)
{
    if (cat == NULL) {
        return;
    }
    for (size_t i = 0; i < cat->nbuckets; i++) {
        db_session_t *s = cat->buckets[i];
        while (s != NULL) {
            db_session_t *next = s->next;
            SHL_INVARIANT(!s->checked_out);
            session_free(s);
            s = next;
        }
    }
    bson_free(cat->buckets);
    pthread_mutex_destroy(&cat->mu);
    pthread_cond_destroy(&cat->cv);
    bson_free(cat);
}

/* The session's lsid document, serialised once for the documents its writes lay out. */
static void
session_lsid_doc(db_session_t *s)
{
    bson_t tmp = BSON_INITIALIZER, sub;

    shl_lsid_append(&tmp, "l", &s->lsid);
    SHL_INVARIANT(shl_bson_get_subdoc(&tmp, "l", &sub) && sub.len <= sizeof(s->lsid_doc));
    memcpy(s->lsid_doc, bson_get_data(&sub), sub.len);
    s->lsid_doc_len = sub.len;
    bson_destroy(&tmp);
}

/* The session of 'lsid', created when absent. Caller holds cat->mu. */
static db_session_t *
session_get(db_session_catalog_t *cat, const shl_lsid_t *lsid)
{
    size_t b = shl_lsid_hash(lsid) & (cat->nbuckets - 1);
    db_session_t *s = cat->buckets[b];

    while (s != NULL && !shl_lsid_equal(&s->lsid, lsid)) {
        s = s->next;
    }
    if (s == NULL) {
        s = bson_malloc0(sizeof(*s));
        s->lsid = *lsid;
        s->cat = cat;
        s->txn_number = -1;
        s->child_txn_number = -1;
        s->prepared_txn = -1;
        s->conflict_aborted_txn = -1;
        session_lsid_doc(s);
        s->next = cat->buckets[b];
        cat->buckets[b] = s;
        cat->count++;
    }
    return s;
}

bool
db_session_catalog_forget(db_session_catalog_t *cat, const shl_lsid_t *lsid)
{
    size_t b = shl_lsid_hash(lsid) & (cat->nbuckets - 1);
    db_session_t **pp, *s = NULL;
    bool gone = true;

    pthread_mutex_lock(&cat->mu);
    for (pp = &cat->buckets[b]; *pp != NULL; pp = &(*pp)->next) {
        if (shl_lsid_equal(&(*pp)->lsid, lsid)) {
            s = *pp;
            break;
        }
    }
    if (s != NULL && (s->checked_out || s->waiters > 0 || db_txn_is_open(s->txn))) {
        gone = false;
    } else if (s != NULL) {
        *pp = s->next;
        cat->count--;
        session_free(s);
    }
    pthread_mutex_unlock(&cat->mu);
    return gone;
}

/* ---------------------------------------------------------------- loading */

/* The timestamp of {ts, t} at 'key' of 'doc' (0 when absent or null). */
static uint64_t
optime_ts(const bson_t *doc, const char *key)
{
    bson_iter_t it, f;

    if (bson_iter_init_find(&it, doc, key) && BSON_ITER_HOLDS_DOCUMENT(&it) &&
        bson_iter_recurse(&it, &f) && bson_iter_find(&f, "ts") && BSON_ITER_HOLDS_TIMESTAMP(&f)) {
        return shl_bson_iter_timestamp_u64(&f);
    }
    return 0;
}

/*
 * Add the statement ids of oplog entry 'e' (its stmtId: an int, or an array of them) at
 * 'ts' to the session. A dead-end marker (DB_INCOMPLETE_HISTORY_STMT_ID) makes its history
 * incomplete.
 */
static void
note_entry_stmts(db_session_t *s, const bson_t *e, uint64_t ts)
{
    bson_iter_t it, arr;

    if (!bson_iter_init_find(&it, e, "stmtId")) {
        return;
    }
    if (BSON_ITER_HOLDS_ARRAY(&it) && bson_iter_recurse(&it, &arr)) {
        while (shl_iter_next(&arr)) {
            int32_t id = (int32_t)bson_iter_as_int64(&arr);
            if (id == DB_INCOMPLETE_HISTORY_STMT_ID) {
                s->incomplete = true;
            } else {
                stmt_map_put(&s->stmts, id, ts);
            }
        }
    } else if (BSON_ITER_HOLDS_NUMBER(&it)) {
        int32_t id = (int32_t)bson_iter_as_int64(&it);
        if (id == DB_INCOMPLETE_HISTORY_STMT_ID) {
            s->incomplete = true;
        } else {
            stmt_map_put(&s->stmts, id, ts);
        }
    }
}

/*
 * Load the session's state from its config.transactions document and the chain of oplog
 * entries it points to (newest first, each entry's prevOpTime leading to the one before);
 * a link the oplog no longer has leaves the history incomplete.
 */
static int
session_load(db_session_catalog_t *cat, db_session_t *s, shl_status_t *st)
{
    int ret = 0;
    shl_storage_txn_t *txn = NULL;
    shl_collection_t *tc = shl_catalog_get(cat->eng, DB_TRANSACTIONS_NS);
    shl_collection_t *oplog = shl_oplog_collection(cat->eng);
    bson_t key = BSON_INITIALIZER, doc = BSON_INITIALIZER, entry = BSON_INITIALIZER;
    bson_iter_t it;
    int64_t rid = 0;
    bool found = false;
    uint64_t ts;

    s->txn_number = -1;
    s->last_write_ts = 0;
    s->incomplete = false;
    stmt_map_clear(&s->stmts);
    if (tc == NULL) {
        goto loaded;
    }
    SHL_ERR(shl_storage_txn_begin(cat->eng, NULL, &txn, st));
    shl_lsid_append(&key, "_id", &s->lsid);
    bson_iter_init_find(&it, &key, "_id");
    bson_destroy(&doc);
    SHL_ERR(shl_doc_find_by_id(txn, tc, bson_iter_value(&it), &doc, &rid, &found, st));
    if (!found) {
        goto loaded;
    }
    s->txn_number = shl_bson_int64_at(&doc, "txnNum");
    s->last_write_ts = optime_ts(&doc, "lastWriteOpTime");
    s->record_rid = rid;
    for (ts = s->last_write_ts; ts != 0 && oplog != NULL;) {
        bson_destroy(&entry);
        SHL_ERR(shl_record_get(txn, oplog, (int64_t)ts, &entry, &found, st));
        if (!found || shl_bson_int64_at(&entry, "txnNumber") != s->txn_number) {
            /* Truncated, or a chain that leads elsewhere: what is older is unknown. */
            s->incomplete = s->incomplete || !found;
            break;
        }
        note_entry_stmts(s, &entry, ts);
        ts = optime_ts(&entry, "prevOpTime");
    }
loaded:
    s->loaded = true;
done:
    if (txn != NULL) {
        shl_storage_txn_abort(txn);
    }
    shl_collection_release(tc);
    shl_collection_release(oplog);
    bson_destroy(&key);
    bson_destroy(&doc);
    bson_destroy(&entry);
    return ret;
}

/* ---------------------------------------------------------------- checkout */

/* With cat->mu held: whether 'op' must wait before it checks out 's' -- another operation
 * has it, or ('newer') the session's own transaction is prepared and op->txn_number is newer
 * (MongoDB: a new transaction or retryable write on a session blocks behind its prepared
 * transaction until the decision arrives, which needs the session checked in). */
static bool
session_busy_locked(const db_session_t *s, const shl_op_ctx_t *op, bool newer)
{
    return s->checked_out ||
           (newer && s->prepared_txn >= 0 && op->has_txn_number && op->txn_number > s->prepared_txn);
}

/* Check out the session of 'lsid' for 'op' (waiting while session_busy_locked) and load it. */
static int
session_acquire(db_session_catalog_t *cat, shl_op_ctx_t *op, const shl_lsid_t *lsid, bool newer,
                db_session_t **out, shl_status_t *st)
{
    int ret = 0;
    db_session_t *s;

    *out = NULL;
    pthread_mutex_lock(&cat->mu);
    s = session_get(cat, lsid);
    s->waiters++;
    while (session_busy_locked(s, op, newer)) {
        ret = shl_op_check_interrupt(op, st);
        if (ret != 0) {
            break;
        }
        shl_cond_timedwait_ms(&cat->cv, &cat->mu, CHECKOUT_SLICE_MS);
    }
    s->waiters--;
    if (ret == 0) {
        s->checked_out = true;
    }
    pthread_mutex_unlock(&cat->mu);
    SHL_ERR(ret);
    *out = s;
    if (!s->loaded) {
        SHL_ERR(session_load(cat, s, st));
    }
done:
    return ret;
}

static void
session_release(db_session_catalog_t *cat, db_session_t *s)
{
    pthread_mutex_lock(&cat->mu);
    s->checked_out = false;
    pthread_cond_broadcast(&cat->cv);
    pthread_mutex_unlock(&cat->mu);
}

/* Move the session to retryable write 'txn_number' when it is newer than its own. */
static void
session_begin_txn(db_session_t *s, int64_t txn_number)
{
    if (txn_number > s->txn_number) {
        s->txn_number = txn_number;
        s->last_write_ts = 0;
        s->incomplete = false;
        stmt_map_reset(&s->stmts);
    }
}

/* How long a retry of a retryable write waits for a prepared child transaction of it. */
#define DB_PREPARED_CHILD_WAIT_MS 60000

/* With cat->mu held: wait while a child of 's' is prepared (bounded; the retry then runs as
 * it would have before). */
static void
wait_prepared_children_locked(db_session_catalog_t *cat, db_session_t *s)
{
    struct timespec deadline;

    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += DB_PREPARED_CHILD_WAIT_MS / 1000;
    while (s->prepared_children > 0 &&
           pthread_cond_timedwait(&cat->cv, &cat->mu, &deadline) == 0) {
    }
}

/*
 * With cat->mu held: retryable write 'txn_number' of parent session 's' begins, directly or
 * through a child transaction. A newer one than the parent's forgets the parent's answers; the
 * same one (a retry) waits while a child of it is prepared (its answer may be on its way); an
 * older one is TransactionTooOld (worded for a child transaction when 'child').
 */
static int
parent_write_begin_locked(db_session_catalog_t *cat, db_session_t *s, int64_t txn_number,
                          bool child, shl_status_t *st)
{
    char id[37], head[160];
    int ret = 0;

    if (txn_number > s->child_txn_number) {
        s->child_txn_number = txn_number;
        s->open_children = 0; /* those of older writes no longer count */
        answers_clear(s);
    } else if (txn_number == s->child_txn_number) {
        wait_prepared_children_locked(cat, s);
    } else {
        shl_lsid_id_string(&s->lsid, id);
        if (child) {
            snprintf(head, sizeof(head),
                     "Cannot start a retryable internal transaction for txnNumber %lld",
                     (long long)txn_number);
        } else {
            snprintf(head, sizeof(head), "Retryable write with txnNumber %lld is prohibited",
                     (long long)txn_number);
        }
        ret = shl_status_set(st, SHL_CODE_TRANSACTION_TOO_OLD,
                             "%s on session %s because a newer retryable write with txnNumber "
                             "%lld has already started on this session.",
                             head, id, (long long)s->child_txn_number);
    }
    return ret;
}

int
db_session_checkout(db_session_catalog_t *cat, shl_op_ctx_t *op, shl_status_t *st)
{
    int ret = 0;
    db_session_t *s = NULL;
    char id[37];

    ret = session_acquire(cat, op, &op->lsid_key, true, &s, st);
    if (ret != 0) {
        goto done;
    }
    if (op->txn_number < s->txn_number) {
        shl_lsid_id_string(&s->lsid, id);
        SHL_FAIL(st, SHL_CODE_TRANSACTION_TOO_OLD,
                 "Retryable write with txnNumber %lld is prohibited on session %s because a "
                 "newer retryable write with txnNumber %lld has already started on this session.",
                 (long long)op->txn_number, id, (long long)s->txn_number);
    }
    /* Retryable internal transactions of a newer write count as the session's own. */
    pthread_mutex_lock(&cat->mu);
    ret = parent_write_begin_locked(cat, s, op->txn_number, false, st);
    pthread_mutex_unlock(&cat->mu);
    SHL_ERR(ret);
    session_begin_txn(s, op->txn_number);
    op->session = s;
done:
    if (ret != 0 && s != NULL) {
        session_release(cat, s);
    }
    return ret;
}

int
db_session_checkout_txn(db_session_catalog_t *cat, shl_op_ctx_t *op, db_session_t **out,
                        shl_status_t *st)
{
    return session_acquire(cat, op, &op->lsid_key, op->start_transaction, out, st);
}

void
db_session_checkin_txn(db_session_catalog_t *cat, db_session_t *s)
{
    session_release(cat, s);
}

int64_t
db_session_txn_number(const db_session_t *s)
{
    return s->txn_number;
}

void
db_session_set_txn_number(db_session_t *s, int64_t txn_number)
{
    session_begin_txn(s, txn_number);
}

void **
db_session_txn_slot(db_session_t *s)
{
    return &s->txn;
}

const shl_lsid_t *
db_session_lsid(const db_session_t *s)
{
    return &s->lsid;
}

int
db_session_checkout_lsid(db_session_catalog_t *cat, shl_op_ctx_t *op, const shl_lsid_t *lsid,
                         db_session_t **out, shl_status_t *st)
{
    return session_acquire(cat, op, lsid, false, out, st);
}

db_session_t *
db_session_catalog_attach(db_session_catalog_t *cat, const shl_lsid_t *lsid)
{
    db_session_t *s;

    pthread_mutex_lock(&cat->mu);
    s = session_get(cat, lsid);
    pthread_mutex_unlock(&cat->mu);
    return s;
}

void
db_session_catalog_each(db_session_catalog_t *cat, void (*fn)(void *arg, db_session_t *s),
                        void *arg)
{
    pthread_mutex_lock(&cat->mu);
    for (size_t i = 0; i < cat->nbuckets; i++) {
        for (db_session_t *s = cat->buckets[i]; s != NULL; s = s->next) {
            fn(arg, s);
        }
    }
    pthread_mutex_unlock(&cat->mu);
}

void
db_session_checkin(db_session_catalog_t *cat, shl_op_ctx_t *op)
{
    if (op->session != NULL) {
        session_release(cat, op->session);
        op->session = NULL;
    }
}

static int image_lookup(shl_storage_engine_t *eng, const shl_lsid_t *lsid, int64_t txn_number,
                        uint64_t ts, const char *image_kind, bson_t *out, shl_status_t *st);

/* ---------------------------------------------------------------- child sessions */

int
db_session_child_begin(db_session_catalog_t *cat, shl_op_ctx_t *op, const shl_lsid_t *child,
                       shl_status_t *st)
{
    shl_lsid_t parent;
    db_session_t *s;
    int64_t n;
    int ret = 0;

    if (cat == NULL || !child->child || !child->has_parent_txn_number) {
        goto done;
    }
    shl_lsid_parent(child, &parent);
    n = child->parent_txn_number;
    pthread_mutex_lock(&cat->mu);
    s = session_get(cat, &parent);
    ret = parent_write_begin_locked(cat, s, n, true, st);
    /* Another attempt of the same write still open (MongoDB: RetryableTransactionInProgress,
     * on which the shard waits for it to end): wait, then the retry finds its answers. */
    while (ret == 0 && op != NULL && s->open_children > 0 && s->child_txn_number == n) {
        if ((ret = shl_op_check_interrupt(op, st)) != 0) {
            break;
        }
        shl_cond_timedwait_ms(&cat->cv, &cat->mu, CHECKOUT_SLICE_MS);
    }
    pthread_mutex_unlock(&cat->mu);
done:
    return ret;
}

bool
db_session_child_conflict_claim(db_session_catalog_t *cat, const shl_lsid_t *child)
{
    shl_lsid_t parent;
    db_session_t *s;
    bool first = false;

    if (cat != NULL && child->child && child->has_parent_txn_number) {
        shl_lsid_parent(child, &parent);
        pthread_mutex_lock(&cat->mu);
        s = session_get(cat, &parent);
        /* A conflict of an older write than the parent's newest is TransactionTooOld later. */
        first = s->child_txn_number <= child->parent_txn_number &&
                s->conflict_aborted_txn != child->parent_txn_number;
        if (first) {
            s->conflict_aborted_txn = child->parent_txn_number;
        }
        pthread_mutex_unlock(&cat->mu);
    }
    return first;
}

/* One more ('up') or one fewer (never below zero) in counter '*n' (under cat->mu). */
static void
count_step(int *n, bool up)
{
    *n += up ? 1 : -1;
    if (*n < 0) {
        *n = 0;
    }
}

void
db_session_child_open(db_session_catalog_t *cat, const shl_lsid_t *child, bool open)
{
    shl_lsid_t parent;
    db_session_t *s;

    if (cat == NULL || !child->child || !child->has_parent_txn_number) {
        return;
    }
    shl_lsid_parent(child, &parent);
    pthread_mutex_lock(&cat->mu);
    s = session_get(cat, &parent);
    if (s->child_txn_number == child->parent_txn_number) {
        count_step(&s->open_children, open);
    }
    if (!open) {
        pthread_cond_broadcast(&cat->cv);
    }
    pthread_mutex_unlock(&cat->mu);
}

void
db_session_txn_prepared(db_session_catalog_t *cat, const shl_lsid_t *lsid, int64_t txn_number,
                        bool prepared)
{
    shl_lsid_t parent;
    db_session_t *s;

    if (cat == NULL) {
        return;
    }
    pthread_mutex_lock(&cat->mu);
    s = session_get(cat, lsid);
    s->prepared_txn = prepared ? txn_number : -1;
    if (lsid->child && lsid->has_parent_txn_number) {
        shl_lsid_parent(lsid, &parent);
        s = session_get(cat, &parent);
        count_step(&s->prepared_children, prepared);
    }
    if (!prepared) {
        pthread_cond_broadcast(&cat->cv);
    }
    pthread_mutex_unlock(&cat->mu);
}

void
db_session_child_commit(db_session_catalog_t *cat, const shl_lsid_t *child, uint64_t ts,
                        const int32_t *stmt_ids, bson_t *const *answers, size_t n)
{
    shl_lsid_t parent;
    db_session_t *s;

    if (cat == NULL || n == 0 || !child->child || !child->has_parent_txn_number) {
        return;
    }
    shl_lsid_parent(child, &parent);
    pthread_mutex_lock(&cat->mu);
    s = session_get(cat, &parent);
    /* A child of an older write than the session's newest one is history nobody asks for. */
    for (size_t i = 0; child->parent_txn_number == s->child_txn_number && i < n; i++) {
        if (s->nanswers == s->capanswers) {
            s->capanswers = s->capanswers != 0 ? s->capanswers * 2 : 4;
            s->answers = bson_realloc(s->answers, s->capanswers * sizeof(*s->answers));
        }
        s->answers[s->nanswers].stmt_id = stmt_ids[i];
        s->answers[s->nanswers].ts = ts;
        s->answers[s->nanswers].answer = bson_copy(answers[i]);
        s->nanswers++;
    }
    pthread_mutex_unlock(&cat->mu);
}

bool
db_session_child_answer(db_session_catalog_t *cat, const shl_op_ctx_t *op, int32_t stmt_id,
                        bson_t *out)
{
    shl_lsid_t parent;
    int64_t n;
    db_session_t *s;
    bool found = false;

    bson_init(out);
    if (cat == NULL || !op->has_lsid || !op->has_txn_number) {
        return false;
    }
    if (op->lsid_key.child && op->lsid_key.has_parent_txn_number && op->txn != NULL) {
        shl_lsid_parent(&op->lsid_key, &parent);
        n = op->lsid_key.parent_txn_number;
    } else if (op->session != NULL) {
        parent = op->lsid_key;
        n = op->txn_number;
    } else {
        return false;
    }
    pthread_mutex_lock(&cat->mu);
    s = session_get(cat, &parent);
    for (size_t i = 0; s->child_txn_number == n && i < s->nanswers && !found; i++) {
        if (s->answers[i].stmt_id == stmt_id) {
            bson_concat(out, s->answers[i].answer);
            found = true;
        }
    }
    pthread_mutex_unlock(&cat->mu);
    if (found) {
        atomic_fetch_add(&cat->retried_statements, 1);
    }
    return found;
}

void
db_session_child_each(db_session_catalog_t *cat,
                      void (*fn)(void *arg, const shl_lsid_t *parent, int64_t txn_number,
                                 int32_t stmt_id, uint64_t ts, const bson_t *answer),
                      void *arg)
{
    pthread_mutex_lock(&cat->mu);
    for (size_t b = 0; b < cat->nbuckets; b++) {
        for (const db_session_t *s = cat->buckets[b]; s != NULL; s = s->next) {
            for (size_t i = 0; i < s->nanswers; i++) {
                fn(arg, &s->lsid, s->child_txn_number, s->answers[i].stmt_id, s->answers[i].ts,
                   s->answers[i].answer);
            }
        }
    }
    pthread_mutex_unlock(&cat->mu);
}

int
db_session_parent_answer(db_session_catalog_t *cat, shl_op_ctx_t *op, int32_t stmt_id,
                         bool fam, bson_t *out, bool *found, shl_status_t *st)
{
    shl_lsid_t parent;
    db_session_t *s = NULL;
    uint64_t ts = 0;
    shl_storage_txn_t *txn = NULL;
    shl_collection_t *oplog = NULL;
    bson_t entry = BSON_INITIALIZER, w, o;
    bson_iter_t it;
    const char *kind = "";
    bool have = false;
    int ret = 0;

    bson_init(out);
    *found = false;
    if (cat == NULL || !op->lsid_key.child || !op->lsid_key.has_parent_txn_number ||
        op->txn == NULL) {
        goto done;
    }
    shl_lsid_parent(&op->lsid_key, &parent);
    SHL_ERR(session_acquire(cat, op, &parent, false, &s, st));
    if (s->txn_number == op->lsid_key.parent_txn_number) {
        ts = stmt_map_get(&s->stmts, stmt_id);
    }
    session_release(cat, s);
    if (ts == 0) {
        goto done;
    }
    oplog = shl_oplog_collection(cat->eng);
    SHL_ERR(shl_storage_txn_begin(cat->eng, NULL, &txn, st));
    bson_destroy(&entry);
    SHL_ERR(shl_record_get(txn, oplog, (int64_t)ts, &entry, &have, st));
    if (!have) {
        SHL_FAIL(st, SHL_CODE_INCOMPLETE_TRANSACTION_HISTORY,
                 "Incomplete history detected for transaction %lld: statement %d ran as a "
                 "retryable write whose answer cannot be rebuilt here",
                 (long long)op->lsid_key.parent_txn_number, (int)stmt_id);
    }
    if (!(bson_iter_init_find(&it, &entry, "op") && BSON_ITER_HOLDS_UTF8(&it) &&
          strcmp(bson_iter_utf8(&it, NULL), "n") == 0 && shl_bson_get_subdoc(&entry, "o2", &w))) {
        bson_init_static(&w, bson_get_data(&entry), entry.len);
    }
    if (bson_iter_init_find(&it, &w, "op") && BSON_ITER_HOLDS_UTF8(&it)) {
        kind = bson_iter_utf8(&it, NULL);
    }
    if (fam) {
        /* A findAndModify: its write and where, for its image (db_session_parent_image). */
        BSON_APPEND_UTF8(out, "k", "F");
        BSON_APPEND_DOCUMENT(out, "w", &w);
        shl_bson_append_timestamp_u64(out, "ts", ts);
    } else if (strcmp(kind, "i") == 0 && shl_bson_get_subdoc(&w, "o", &o) &&
        bson_iter_init_find(&it, &o, "_id")) {
        BSON_APPEND_UTF8(out, "k", "i");
        bson_append_iter(out, "_id", 3, &it);
        BSON_APPEND_DOCUMENT(out, "doc", &o);
    } else if (strcmp(kind, "u") == 0 || strcmp(kind, "d") == 0) {
        BSON_APPEND_UTF8(out, "k", kind);
    } else {
        SHL_FAIL(st, SHL_CODE_INCOMPLETE_TRANSACTION_HISTORY,
                 "Incomplete history detected for transaction %lld: statement %d",
                 (long long)op->lsid_key.parent_txn_number, (int)stmt_id);
    }
    *found = true;
    atomic_fetch_add(&cat->retried_statements, 1);
done:
    if (txn != NULL) {
        shl_storage_txn_abort(txn);
    }
    shl_collection_release(oplog);
    bson_destroy(&entry);
    return ret;
}

/* The answers listed in the entry at 'ts' (a prepared transaction's decision entry: in the
 * prepare entry before it), given to the parent of 'child'. */
static int
recover_child(db_session_catalog_t *cat, shl_storage_txn_t *txn, shl_collection_t *oplog,
              const shl_lsid_t *child, uint64_t ts, shl_status_t *st)
{
    bson_t entry = BSON_INITIALIZER, o;
    bson_iter_t it, a;
    bool found = false;
    int32_t *ids = NULL;
    bson_t **answers = NULL;
    size_t n = 0, cap = 0;
    shl_status_t ignored = SHL_STATUS_INIT;
    int ret = 0;

    for (int hop = 0; hop < 2 && ts != 0; hop++) {
        bson_destroy(&entry);
        SHL_ERR(shl_record_get(txn, oplog, (int64_t)ts, &entry, &found, st));
        if (!found || !shl_bson_get_subdoc(&entry, "o", &o)) {
            goto done;
        }
        if (!bson_has_field(&o, "commitTransaction")) {
            break;
        }
        ts = optime_ts(&entry, "prevOpTime");
    }
    if (!found || !shl_bson_get_subdoc(&entry, "o", &o) ||
        !bson_iter_init_find(&a, &o, DB_RETRY_ANSWERS_FIELD) || !BSON_ITER_HOLDS_ARRAY(&a) ||
        !bson_iter_recurse(&a, &it)) {
        goto done;
    }
    while (bson_iter_next(&it)) {
        bson_t one, answer;
        if (!BSON_ITER_HOLDS_DOCUMENT(&it)) {
            continue;
        }
        {
            const uint8_t *data;
            uint32_t len;
            bson_iter_document(&it, &len, &data);
            bson_init_static(&one, data, len);
        }
        if (!bson_iter_init_find(&a, &one, "stmtId") || !BSON_ITER_HOLDS_INT32(&a) ||
            !shl_bson_get_subdoc(&one, "answer", &answer)) {
            continue;
        }
        if (n == cap) {
            cap = cap != 0 ? cap * 2 : 4;
            ids = bson_realloc(ids, cap * sizeof(*ids));
            answers = bson_realloc(answers, cap * sizeof(*answers));
        }
        ids[n] = bson_iter_int32(&a);
        answers[n] = bson_copy(&answer);
        n++;
    }
    (void)db_session_child_begin(cat, NULL, child, &ignored);
    db_session_child_commit(cat, child, ts, ids, answers, n);
    SHL_LOG_DEBUG(1, TXN, 7170010, "recovered the answers of a retryable internal transaction",
                 "parentTxnNumber", BCON_INT64(child->parent_txn_number), "statements",
                 BCON_INT64((int64_t)n));
done:
    for (size_t i = 0; i < n; i++) {
        bson_destroy(answers[i]);
    }
    bson_free(ids);
    bson_free(answers);
    bson_destroy(&entry);
    return ret;
}

int
db_session_recover_children(db_session_catalog_t *cat, shl_status_t *st)
{
    shl_storage_txn_t *txn = NULL;
    shl_collection_t *tc = shl_catalog_get(cat->eng, DB_TRANSACTIONS_NS);
    shl_collection_t *oplog = shl_oplog_collection(cat->eng);
    shl_record_cursor_t *c = NULL;
    int ret = 0;

    if (tc == NULL || oplog == NULL) {
        goto done;
    }
    SHL_ERR(shl_storage_txn_begin(cat->eng, NULL, &txn, st));
    SHL_ERR(shl_record_cursor_open(txn, tc, true, &c, st));
    for (;;) {
        int64_t rid;
        bson_t doc, id;
        bson_iter_t it;
        bool eof;
        shl_lsid_t child;
        shl_status_t pst = SHL_STATUS_INIT;
        SHL_ERR(shl_record_cursor_next(c, &rid, &doc, &eof, st));
        if (eof) {
            break;
        }
        if (!shl_bson_get_subdoc(&doc, "_id", &id) || !bson_has_field(&id, "txnUUID") ||
            !bson_has_field(&id, "txnNumber") || !bson_iter_init_find(&it, &doc, "state") ||
            !BSON_ITER_HOLDS_UTF8(&it) || strcmp(bson_iter_utf8(&it, NULL), "committed") != 0 ||
            shl_lsid_parse(&id, &child, &pst) != 0 || !child.child ||
            !child.has_parent_txn_number) {
            continue;
        }
        SHL_ERR(recover_child(cat, txn, oplog, &child, optime_ts(&doc, "lastWriteOpTime"), st));
    }
done:
    shl_record_cursor_close(c);
    if (txn != NULL) {
        shl_storage_txn_abort(txn);
    }
    shl_collection_release(tc);
    shl_collection_release(oplog);
    return ret;
}

/* ---------------------------------------------------------------- statistics */

void
db_session_catalog_append_stats(db_session_catalog_t *cat, bson_t *reply)
{
    bson_t *t = reply;

    BSON_APPEND_INT64(t, "retriedCommandsCount",
                      cat != NULL ? atomic_load(&cat->retried_commands) : 0);
    BSON_APPEND_INT64(t, "retriedStatementsCount",
                      cat != NULL ? atomic_load(&cat->retried_statements) : 0);
    BSON_APPEND_INT64(t, "transactionsCollectionWriteCount",
                      cat != NULL ? atomic_load(&cat->transactions_writes) : 0);
}

void
db_session_note_retried(const shl_op_ctx_t *op, int64_t n)
{
    const db_session_t *s = op->session;

    if (s != NULL && n > 0) {
        atomic_fetch_add(&s->cat->retried_commands, 1);
        atomic_fetch_add(&s->cat->retried_statements, n);
    }
}

/* ---------------------------------------------------------------- statements */

static int
incomplete_history(const db_session_t *s, shl_status_t *st)
{
    char id[37];

    shl_lsid_id_string(&s->lsid, id);
    return shl_status_set(st, SHL_CODE_INCOMPLETE_TRANSACTION_HISTORY,
                          "Incomplete history detected for transaction %lld on session %s",
                          (long long)s->txn_number, id);
}

int
db_session_stmt_executed(const shl_op_ctx_t *op, int32_t stmt_id, uint64_t *ts, bool *executed,
                         shl_status_t *st)
{
    const db_session_t *s = op->session;
    int ret = 0;

    *executed = false;
    *ts = 0;
    if (s == NULL) {
        goto done;
    }
    *ts = stmt_map_get(&s->stmts, stmt_id);
    *executed = *ts != 0;
    if (!*executed && s->incomplete) {
        ret = incomplete_history(s, st);
    }
done:
    return ret;
}

int
db_session_read_entry(const shl_op_ctx_t *op, uint64_t ts, bson_t *out, shl_status_t *st)
{
    int ret = 0;
    const db_session_t *s = op->session;
    shl_storage_engine_t *eng = op->svc->storage;
    shl_collection_t *oplog = shl_oplog_collection(eng);
    shl_storage_txn_t *txn = NULL;
    bson_t entry = BSON_INITIALIZER, o2;
    bson_iter_t it;
    bool found = false;

    bson_init(out);
    SHL_ERR(shl_storage_txn_begin(eng, NULL, &txn, st));
    bson_destroy(&entry);
    SHL_ERR(shl_record_get(txn, oplog, (int64_t)ts, &entry, &found, st));
    if (!found) {
        SHL_ERR(incomplete_history(s, st));
    }
    bson_destroy(out);
    /* A migrated statement is a no-op whose o2 is the original write. */
    if (bson_iter_init_find(&it, &entry, "op") && BSON_ITER_HOLDS_UTF8(&it) &&
        strcmp(bson_iter_utf8(&it, NULL), "n") == 0 && shl_bson_get_subdoc(&entry, "o2", &o2)) {
        bson_copy_to(&o2, out);
    } else {
        bson_copy_to(&entry, out);
    }
done:
    if (txn != NULL) {
        shl_storage_txn_abort(txn);
    }
    shl_collection_release(oplog);
    bson_destroy(&entry);
    return ret;
}

/* ---------------------------------------------------------------- recording */

void
db_stmt_recorder_init(db_stmt_recorder_t *r, shl_op_ctx_t *op)
{
    memset(r, 0, sizeof(*r));
    r->op = op;
    r->s = op->session;
    r->stmt_ids = r->ids_inline;
    r->ts = r->ts_inline;
    r->cap = DB_STMT_RECORDER_INLINE;
}

void
db_stmt_recorder_cleanup(db_stmt_recorder_t *r)
{
    if (r->stmt_ids != r->ids_inline) {
        bson_free(r->stmt_ids);
        bson_free(r->ts);
    }
    r->stmt_ids = r->ids_inline;
    r->ts = r->ts_inline;
    r->cap = DB_STMT_RECORDER_INLINE;
}

void
db_stmt_recorder_begin(db_stmt_recorder_t *r)
{
    r->n = 0;
    r->prev_ts = r->s != NULL ? r->s->last_write_ts : 0;
}

/* Hand-laid BSON for the documents every retryable write makes (fixed layouts, into the
 * session's buffers): each put_ writes one element with key 'k' (with its NUL, 'kn' bytes)
 * at 'p' and returns the end. Little-endian, as every target of this code is. */
static uint8_t *
put_key(uint8_t *p, uint8_t type, const char *k, size_t kn)
{
    *p++ = type;
    memcpy(p, k, kn);
    return p + kn;
}

static uint8_t *
put_i64(uint8_t *p, uint8_t type, const char *k, size_t kn, int64_t v)
{
    p = put_key(p, type, k, kn);
    memcpy(p, &v, 8);
    return p + 8;
}

/* {ts: Timestamp, t: long} (an optime) */
static uint8_t *
put_optime(uint8_t *p, const char *k, size_t kn, uint64_t ts, int64_t term)
{
    uint32_t len = 4 + (1 + 3 + 8) + (1 + 2 + 8) + 1;

    p = put_key(p, BSON_TYPE_DOCUMENT, k, kn);
    memcpy(p, &len, 4);
    p += 4;
    p = put_i64(p, BSON_TYPE_TIMESTAMP, "ts", 3, (int64_t)ts); /* increment, then seconds */
    p = put_i64(p, BSON_TYPE_INT64, "t", 2, term);
    *p++ = 0;
    return p;
}

static uint8_t *
put_lsid(uint8_t *p, const char *k, size_t kn, const db_session_t *s)
{
    p = put_key(p, BSON_TYPE_DOCUMENT, k, kn);
    memcpy(p, s->lsid_doc, s->lsid_doc_len);
    return p + s->lsid_doc_len;
}

/* Close the document laid out in 'buf' up to 'p' and make 'view' a read-only view of it. */
static void
put_end(uint8_t *buf, uint8_t *p, size_t cap, bson_t *view)
{
    uint32_t len;

    *p++ = 0;
    len = (uint32_t)(p - buf);
    SHL_INVARIANT(len <= cap);
    memcpy(buf, &len, 4);
    SHL_INVARIANT(bson_init_static(view, buf, len));
}

const shl_write_opts_t *
db_stmt_recorder_opts(db_stmt_recorder_t *r, int32_t stmt_id, shl_write_opts_t *wo)
{
    return db_stmt_recorder_opts_image(r, stmt_id, NULL, wo);
}

const shl_write_opts_t *
db_stmt_recorder_opts_image(db_stmt_recorder_t *r, int32_t stmt_id, const char *image_kind,
                            shl_write_opts_t *wo)
{
    int64_t term;
    uint8_t *buf, *p;

    if (r->s == NULL) {
        return NULL;
    }
    term = shl_storage_term(r->op->svc->storage);
    buf = r->s->fields_buf;
    p = put_lsid(buf + 4, "lsid", 5, r->s);
    p = put_i64(p, BSON_TYPE_INT64, "txnNumber", 10, r->s->txn_number);
    p = put_key(p, BSON_TYPE_INT32, "stmtId", 7);
    memcpy(p, &stmt_id, 4);
    p += 4;
    /* The first write of a retryable write links to nothing: {ts: Timestamp(0, 0), t: -1}. */
    p = put_optime(p, "prevOpTime", 11, r->prev_ts, r->prev_ts != 0 ? term : -1);
    if (image_kind != NULL) { /* "preImage" or "postImage" */
        uint32_t n = (uint32_t)strlen(image_kind) + 1;
        SHL_INVARIANT(n <= 16);
        p = put_key(p, BSON_TYPE_UTF8, "needsRetryImage", 16);
        memcpy(p, &n, 4);
        memcpy(p + 4, image_kind, n);
        p += 4 + n;
    }
    put_end(buf, p, sizeof(r->s->fields_buf), &r->s->oplog_fields);
    memset(wo, 0, sizeof(*wo));
    wo->oplog_extra = &r->s->oplog_fields;
    wo->ts = &r->write_ts;
    r->write_ts = 0;
    return wo;
}

void
db_stmt_recorder_wrote(db_stmt_recorder_t *r, int32_t stmt_id)
{
    if (r->s == NULL || r->write_ts == 0) {
        return;
    }
    if (r->n == r->cap) {
        int32_t *ids = r->stmt_ids != r->ids_inline ? r->stmt_ids : NULL;
        uint64_t *ts = r->ts != r->ts_inline ? r->ts : NULL;
        r->cap *= 2;
        r->stmt_ids = bson_realloc(ids, r->cap * sizeof(*r->stmt_ids));
        r->ts = bson_realloc(ts, r->cap * sizeof(*r->ts));
        if (ids == NULL) { /* leaving the inline arrays */
            memcpy(r->stmt_ids, r->ids_inline, sizeof(r->ids_inline));
            memcpy(r->ts, r->ts_inline, sizeof(r->ts_inline));
        }
    }
    r->stmt_ids[r->n] = stmt_id;
    r->ts[r->n] = r->write_ts;
    r->n++;
    r->prev_ts = r->write_ts;
    r->write_ts = 0;
}

int
db_stmt_recorder_image(db_stmt_recorder_t *r, shl_storage_txn_t *txn, const char *image_kind,
                       const bson_t *doc, shl_status_t *st)
{
    int ret = 0;
    shl_collection_t *ic = NULL;
    bson_t img = BSON_INITIALIZER, cur = BSON_INITIALIZER;
    bson_iter_t it;
    int64_t rid = 0;
    bool found = false;

    if (r->s == NULL || r->n == 0) {
        goto done;
    }
    ic = shl_catalog_get(r->op->svc->storage, DB_IMAGE_COLLECTION_NS);
    if (ic == NULL) {
        SHL_FAIL(st, SHL_CODE_NAMESPACE_NOT_FOUND, "%s does not exist", DB_IMAGE_COLLECTION_NS);
    }
    shl_lsid_append(&img, "_id", &r->s->lsid);
    BSON_APPEND_INT64(&img, "txnNum", r->s->txn_number);
    shl_bson_append_timestamp_u64(&img, "ts", r->ts[r->n - 1]);
    BSON_APPEND_UTF8(&img, "imageKind", image_kind);
    BSON_APPEND_DOCUMENT(&img, "image", doc);
    BSON_APPEND_BOOL(&img, "invalidated", false);
    bson_iter_init_find(&it, &img, "_id");
    bson_destroy(&cur);
    SHL_ERR(shl_doc_find_by_id(txn, ic, bson_iter_value(&it), &cur, &rid, &found, st));
    if (found) {
        SHL_ERR(shl_doc_update(txn, ic, rid, &cur, &img, NULL, st));
    } else {
        SHL_ERR(shl_doc_insert(txn, ic, &img, NULL, NULL, st));
    }
done:
    shl_collection_release(ic);
    bson_destroy(&img);
    bson_destroy(&cur);
    return ret;
}

/* The image of kind 'image_kind' that the findAndModify at 'ts' of retryable write
 * 'txn_number' of session 'lsid' stored (config.image_collection) into *out (always
 * initialised). */
static int
image_lookup(shl_storage_engine_t *eng, const shl_lsid_t *lsid, int64_t txn_number, uint64_t ts,
             const char *image_kind, bson_t *out, shl_status_t *st)
{
    int ret = 0;
    shl_collection_t *ic = shl_catalog_get(eng, DB_IMAGE_COLLECTION_NS);
    shl_storage_txn_t *txn = NULL;
    bson_t key = BSON_INITIALIZER, img = BSON_INITIALIZER, image;
    bson_iter_t it;
    bool found = false;
    char *lsid_str = NULL;

    bson_init(out);
    shl_lsid_append(&key, "_id", lsid);
    if (ic != NULL) {
        SHL_ERR(shl_storage_txn_begin(eng, NULL, &txn, st));
        bson_iter_init_find(&it, &key, "_id");
        bson_destroy(&img);
        SHL_ERR(shl_doc_find_by_id(txn, ic, bson_iter_value(&it), &img, NULL, &found, st));
    }
    if (!found || shl_bson_int64_at(&img, "txnNum") != txn_number ||
        !bson_iter_init_find(&it, &img, "ts") || !BSON_ITER_HOLDS_TIMESTAMP(&it) ||
        shl_bson_iter_timestamp_u64(&it) != ts) {
        bson_t view;
        shl_bson_get_subdoc(&key, "_id", &view);
        lsid_str = shl_bson_to_string(&view);
        SHL_FAIL(st, found ? 5637602 : 5637601,
                 "image collection no longer contains the complete write history of this "
                 "transaction, record with sessionId: %s cannot be found",
                 lsid_str);
    }
    if ((bson_iter_init_find(&it, &img, "invalidated") && bson_iter_as_bool(&it)) ||
        !bson_iter_init_find(&it, &img, "imageKind") || !BSON_ITER_HOLDS_UTF8(&it) ||
        strcmp(bson_iter_utf8(&it, NULL), image_kind) != 0 ||
        !shl_bson_get_subdoc(&img, "image", &image)) {
        bson_t view;
        shl_bson_get_subdoc(&key, "_id", &view);
        lsid_str = shl_bson_to_string(&view);
        SHL_FAIL(st, SHL_CODE_INCOMPLETE_TRANSACTION_HISTORY,
                 "Incomplete transaction history for sessionId: %s txnNumber: %lld", lsid_str,
                 (long long)txn_number);
    }
    bson_destroy(out);
    bson_copy_to(&image, out);
done:
    if (txn != NULL) {
        shl_storage_txn_abort(txn);
    }
    bson_free(lsid_str);
    shl_collection_release(ic);
    bson_destroy(&key);
    bson_destroy(&img);
    return ret;
}

int
db_session_parent_image(const shl_op_ctx_t *op, uint64_t ts, const char *image_kind, bson_t *out,
                        shl_status_t *st)
{
    shl_lsid_t parent;

    shl_lsid_parent(&op->lsid_key, &parent);
    return image_lookup(op->svc->storage, &parent, op->lsid_key.parent_txn_number, ts, image_kind,
                        out, st);
}

int
db_session_find_image(const shl_op_ctx_t *op, uint64_t ts, const char *image_kind, bson_t *out,
                      shl_status_t *st)
{
    const db_session_t *s = op->session;

    return image_lookup(op->svc->storage, &s->lsid, s->txn_number, ts, image_kind, out, st);
}

/* config.transactions {_id: lsid, txnNum, lastWriteOpTime: {ts, t}, lastWriteDate} */
static void
txn_record_build(bson_t *out, const shl_lsid_t *lsid, int64_t txn_number, uint64_t ts, int64_t term,
                 int64_t wall_ms)
{
    bson_t ot;

    bson_init(out);
    shl_lsid_append(out, "_id", lsid);
    BSON_APPEND_INT64(out, "txnNum", txn_number);
    BSON_APPEND_DOCUMENT_BEGIN(out, "lastWriteOpTime", &ot);
    shl_bson_append_timestamp_u64(&ot, "ts", ts);
    BSON_APPEND_INT64(&ot, "t", term);
    bson_append_document_end(out, &ot);
    BSON_APPEND_DATE_TIME(out, "lastWriteDate", wall_ms);
}

/* The same for the session's write, laid out in its buffer: *out a view of it. */
static void
txn_record_lay_out(db_session_t *s, uint64_t ts, int64_t term, int64_t wall_ms, bson_t *out)
{
    uint8_t *p = put_lsid(s->record_buf + 4, "_id", 4, s);

    p = put_i64(p, BSON_TYPE_INT64, "txnNum", 7, s->txn_number);
    p = put_optime(p, "lastWriteOpTime", 16, ts, term);
    p = put_i64(p, BSON_TYPE_DATE_TIME, "lastWriteDate", 14, wall_ms);
    put_end(s->record_buf, p, sizeof(s->record_buf), out);
}

int
db_stmt_recorder_finish(db_stmt_recorder_t *r, shl_storage_txn_t *txn, shl_status_t *st)
{
    int ret = 0;
    shl_collection_t *tc = NULL;

    if (r->s == NULL || r->n == 0) {
        goto done;
    }
    tc = shl_catalog_get(r->op->svc->storage, DB_TRANSACTIONS_NS);
    if (tc == NULL) {
        SHL_FAIL(st, SHL_CODE_NAMESPACE_NOT_FOUND, "%s does not exist", DB_TRANSACTIONS_NS);
    }
    txn_record_lay_out(r->s, r->ts[r->n - 1], shl_storage_term(r->op->svc->storage),
                       shl_clock_wall_ms(), &r->s->record);
    SHL_ERR(shl_doc_upsert_derived(txn, tc, &r->s->record, &r->s->record_rid, st));
done:
    shl_collection_release(tc);
    return ret;
}

void
db_stmt_recorder_commit(db_stmt_recorder_t *r)
{
    if (r->s == NULL || r->n == 0) {
        return;
    }
    atomic_fetch_add(&r->s->cat->transactions_writes, 1);
    for (size_t i = 0; i < r->n; i++) {
        stmt_map_put(&r->s->stmts, r->stmt_ids[i], r->ts[i]);
    }
    r->s->last_write_ts = r->ts[r->n - 1];
    r->n = 0;
}

/* ---------------------------------------------------------------- migration */

/* One migrated write of a group: its entry (a view of an incoming no-op's o2 for such an
 * entry), its statement and its image. */
typedef struct migrate_item {
    const bson_t *entry;
    bson_t o2;
    const bson_t *image;
    const char *image_kind;
    const char *ns;
    int32_t stmt_id;
} migrate_item_t;

/* Writes of one session and txnNumber that share a storage transaction. */
typedef struct migrate_group {
    db_stmt_recorder_t *rec;
    migrate_item_t *items;
    size_t n;
} migrate_group_t;

static int
migrate_group_fn(shl_storage_txn_t *txn, void *arg, shl_status_t *st)
{
    migrate_group_t *g = arg;
    int ret = 0;
    bson_t o = BSON_INITIALIZER, fields = BSON_INITIALIZER;
    shl_write_opts_t wo;
    const shl_write_opts_t *wop;

    BSON_APPEND_INT32(&o, "$sessionMigrateInfo", 1);
    db_stmt_recorder_begin(g->rec);
    for (size_t i = 0; i < g->n; i++) {
        const migrate_item_t *it = &g->items[i];
        wop = db_stmt_recorder_opts(g->rec, it->stmt_id, &wo);
        bson_reinit(&fields);
        bson_concat(&fields, wop->oplog_extra);
        BSON_APPEND_BOOL(&fields, "fromMigrate", true);
        wo.oplog_extra = &fields;
        SHL_ERR(
            shl_oplog_append(txn, 'n', it->ns, NULL, &o, it->entry, &wo, &g->rec->write_ts, st));
        db_stmt_recorder_wrote(g->rec, it->stmt_id);
        if (it->image != NULL) {
            SHL_ERR(db_stmt_recorder_image(g->rec, txn, it->image_kind, it->image, st));
        }
    }
    SHL_ERR(db_stmt_recorder_finish(g->rec, txn, st));
done:
    bson_destroy(&o);
    bson_destroy(&fields);
    return ret;
}

/* The session, txnNumber and statement of a migrated entry. */
typedef struct {
    shl_lsid_t lsid;
    int64_t txn_number;
    int32_t stmt_id;
} migrated_ids_t;

static int
migrated_ids(const bson_t *entry, migrated_ids_t *ids, shl_status_t *st)
{
    int ret = 0;
    bson_t lsid_doc;
    bson_iter_t it;

    if (!shl_bson_get_subdoc(entry, "lsid", &lsid_doc) || !bson_has_field(entry, "txnNumber") ||
        !bson_iter_init_find(&it, entry, "stmtId") || !BSON_ITER_HOLDS_NUMBER(&it)) {
        SHL_FAIL(st, SHL_CODE_UNSUPPORTED_FORMAT,
                 "oplog entry does not have sessionId, txnNumber and stmtId");
    }
    ids->stmt_id = (int32_t)bson_iter_as_int64(&it);
    ids->txn_number = shl_bson_int64_at(entry, "txnNumber");
    SHL_ERR(shl_lsid_parse(&lsid_doc, &ids->lsid, st));
done:
    return ret;
}

/* Take w[0..n) (one session, one txnNumber; a sentinel only alone; ids[i] parsed from w[i])
 * into the catalog in one storage transaction. */
static int
migrate_in_group(db_session_catalog_t *cat, shl_op_ctx_t *op, const db_migrated_write_t *w,
                 const migrated_ids_t *ids, size_t n, shl_status_t *st)
{
    int ret = 0;
    db_session_t *s = NULL;
    db_stmt_recorder_t rec;
    migrate_group_t g = {.rec = &rec, .items = bson_malloc0(n * sizeof(migrate_item_t))};
    bool sentinel = false;

    db_stmt_recorder_init(&rec, op);
    SHL_ERR(session_acquire(cat, op, &ids[0].lsid, false, &s, st));
    if (ids[0].txn_number < s->txn_number) {
        goto done; /* older writes */
    }
    session_begin_txn(s, ids[0].txn_number);
    for (size_t i = 0; i < n; i++) {
        migrate_item_t *it = &g.items[g.n];
        bson_iter_t bi;
        bson_t o2;

        it->stmt_id = ids[i].stmt_id;
        sentinel = it->stmt_id == DB_INCOMPLETE_HISTORY_STMT_ID;
        if (!sentinel && stmt_map_get(&s->stmts, it->stmt_id) != 0) {
            continue; /* known already */
        }
        it->entry = w[i].entry;
        /* A no-op (a sentinel, or an entry migrated here before) keeps its own o2. */
        if (bson_iter_init_find(&bi, w[i].entry, "op") && BSON_ITER_HOLDS_UTF8(&bi) &&
            strcmp(bson_iter_utf8(&bi, NULL), "n") == 0 &&
            shl_bson_get_subdoc(w[i].entry, "o2", &o2)) {
            bson_init_static(&it->o2, bson_get_data(&o2), o2.len);
            it->entry = &it->o2;
        }
        it->ns = "";
        if (bson_iter_init_find(&bi, w[i].entry, "ns") && BSON_ITER_HOLDS_UTF8(&bi)) {
            it->ns = bson_iter_utf8(&bi, NULL);
        }
        if (w[i].image != NULL) {
            it->image = w[i].image;
            it->image_kind =
                bson_has_field(w[i].entry, "postImageOpTime") ? "postImage" : "preImage";
        }
        g.n++;
    }
    if (g.n == 0) {
        goto done;
    }
    rec.s = s;
    SHL_ERR(shl_storage_write_retry(cat->eng, migrate_group_fn, &g, NULL, st));
    if (sentinel) {
        s->incomplete = true;
        s->last_write_ts = rec.ts[rec.n - 1];
    } else {
        db_stmt_recorder_commit(&rec);
    }
done:
    db_stmt_recorder_cleanup(&rec);
    if (s != NULL) {
        session_release(cat, s);
    }
    bson_free(g.items);
    return ret;
}

int
db_session_migrate_in(db_session_catalog_t *cat, shl_op_ctx_t *op, const db_migrated_write_t *w,
                      size_t n, shl_status_t *st)
{
    int ret = 0;
    migrated_ids_t *ids = bson_malloc0((n > 0 ? n : 1) * sizeof(*ids));
    size_t i = 0;

    for (size_t k = 0; k < n; k++) {
        SHL_ERR(migrated_ids(w[k].entry, &ids[k], st));
    }
    while (i < n) {
        size_t j = i + 1;

        while (ids[i].stmt_id != DB_INCOMPLETE_HISTORY_STMT_ID && j < n &&
               j - i < DB_MIGRATE_IN_GROUP_MAX && ids[j].stmt_id != DB_INCOMPLETE_HISTORY_STMT_ID &&
               ids[j].txn_number == ids[i].txn_number && shl_lsid_equal(&ids[j].lsid, &ids[i].lsid)) {
            j++;
        }
        SHL_ERR(migrate_in_group(cat, op, &w[i], &ids[i], j - i, st));
        i = j;
    }
done:
    bson_free(ids);
    return ret;
}

/* ---------------------------------------------------------------- recovery */

static int
derive_unit_fn(shl_storage_txn_t *txn, void *arg, shl_status_t *st)
{
    const bson_t *entry = arg;
    int ret = 0;
    shl_storage_engine_t *eng = shl_storage_txn_engine(txn);
    shl_collection_t *tc = NULL;
    bson_t lsid_doc, cur = BSON_INITIALIZER, rec = BSON_INITIALIZER;
    bson_iter_t it;
    shl_lsid_t lsid;
    shl_status_t ignored = SHL_STATUS_INIT;
    int64_t txn_number, rid = 0;
    uint64_t ts;
    bool found = false;

    if (!shl_bson_get_subdoc(entry, "lsid", &lsid_doc) || !bson_has_field(entry, "txnNumber") ||
        shl_lsid_parse(&lsid_doc, &lsid, &ignored) != 0) {
        goto done;
    }
    tc = shl_catalog_get(eng, DB_TRANSACTIONS_NS);
    if (tc == NULL) {
        goto done;
    }
    txn_number = shl_bson_int64_at(entry, "txnNumber");
    ts = 0;
    if (bson_iter_init_find(&it, entry, "ts") && BSON_ITER_HOLDS_TIMESTAMP(&it)) {
        ts = shl_bson_iter_timestamp_u64(&it);
    }
    shl_lsid_append(&rec, "_id", &lsid);
    bson_iter_init_find(&it, &rec, "_id");
    bson_destroy(&cur);
    SHL_ERR(shl_doc_find_by_id(txn, tc, bson_iter_value(&it), &cur, &rid, &found, st));
    if (found && (shl_bson_int64_at(&cur, "txnNum") > txn_number ||
                  (shl_bson_int64_at(&cur, "txnNum") == txn_number &&
                   optime_ts(&cur, "lastWriteOpTime") >= ts))) {
        goto done; /* a newer write of the session is recorded already */
    }
    bson_destroy(&rec);
    {
        int64_t wall = 0;
        if (bson_iter_init_find(&it, entry, "wall") && BSON_ITER_HOLDS_DATE_TIME(&it)) {
            wall = bson_iter_date_time(&it);
        }
        txn_record_build(&rec, &lsid, txn_number, ts, shl_bson_int64_at(entry, "t"), wall);
    }
    SHL_ERR(shl_doc_upsert_derived(txn, tc, &rec, NULL, st));
done:
    shl_collection_release(tc);
    bson_destroy(&cur);
    bson_destroy(&rec);
    return ret;
}

int
db_session_replay_derive(shl_storage_engine_t *eng, const bson_t *entry, void *arg,
                         shl_status_t *st)
{
    bson_iter_t it;

    (void)arg;
    /* Only a session's write implies anything: the others cost no transaction. */
    if (!bson_has_field(entry, "lsid") || !bson_has_field(entry, "txnNumber") ||
        !bson_iter_init_find(&it, entry, "ts") || !BSON_ITER_HOLDS_TIMESTAMP(&it)) {
        return 0;
    }
    return shl_storage_write_replayed(eng, shl_bson_iter_timestamp_u64(&it), derive_unit_fn,
                                      (void *)(uintptr_t)entry, st);
}
