/*
 * txn_participant.c -- multi-document transactions on a data node: statements of one
 * (lsid, txnNumber) in one storage transaction kept in the session, commit / abort /
 * prepare with their oplog entries, the lifetime limit, counters (txn_participant.h;
 * docs/design/transactions.md; seeds/000 "Transactions", "Committing a Transaction").
 */
#include "db/txn_participant.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "base/clock.h"
#include "base/log.h"
#include "base/options.h"
#include "base/str.h"
#include "bson/bson_iter.h"
#include "bson/bson_util.h"
#include "db/db_private.h"
#include "db/read_concern_wait.h"
#include "db/session_catalog.h"
#include "storage/catalog.h"
#include "storage/index.h"
#include "storage/oplog.h"
#include "storage/write.h"

typedef enum txn_state {
    TXN_IN_PROGRESS,
    TXN_PREPARED,
    TXN_COMMITTED,
    TXN_ABORTED,
} txn_state_t;

typedef struct txn_ns {
    char *ns;
    bool wrote;
} txn_ns_t;

struct db_txn {
    db_txn_registry_t *reg;
    db_session_t *session; /* the session that owns it (its txn slot points here) */
    shl_lsid_t lsid;
    int64_t txn_number;
    txn_state_t state;
    shl_storage_txn_t *stxn; /* NULL once committed or aborted */
    uint64_t read_ts;        /* 0: the latest data at its first read (readConcern local) */
    char level[16];          /* readConcern level */
    uint64_t prepare_ts;     /* 0: not prepared */
    uint64_t pin_ts;         /* the stable timestamp stays below it while prepared (0: none) */
    bool was_prepared;
    int64_t start_wall_ms, start_mono_us;
    int64_t last_active_mono_us;
    /* Collections this transaction created (create, createIndexes or an insert into a missing
     * one): pending in its storage transaction (seen only by its statements), installed at
     * its commit, gone if it aborts; others' writes and DDL on them wait until it ends
     * (db_txn_wait_created). Changed under reg->mu (read by the owner without it). */
    char **created;
    size_t ncreated;
    /* The namespace of the running create/createIndexes statement and whether it existed. */
    char ddl_ns[SHL_NS_MAX + 1];
    bool ddl_existed;
    /* Writes the shard role observes, reported at commit (db_txn_note_write). */
    char **obs_ns;
    bson_t **obs_pre, **obs_post;
    size_t nobs, capobs;
    /* A retryable internal transaction's statements that carry the user's stmtIds and
     * wrote, with their answers (db_txn_note_stmt): the parent session learns them at commit. */
    int32_t *ans_ids;
    bson_t **ans;
    size_t nans, capans;
    /* Guarded by reg->mu. */
    /* Namespaces its statements used (db_txn_note_access): a DDL operation on one waits for
     * the transaction to end, a migration if it wrote one (db_txn_wait_writers). */
    txn_ns_t *nss;
    size_t nns;
    bool active; /* a statement is running */
    bool listed;
    struct db_txn *prev, *next;
};

/* MongoDB's names of the states, as its messages print them. */
static const char *
state_name(const db_txn_t *t)
{
    switch (t->state) {
    case TXN_IN_PROGRESS:
        return "TxnState::InProgress";
    case TXN_PREPARED:
        return "TxnState::Prepared";
    case TXN_COMMITTED:
        return "TxnState::Committed";
    case TXN_ABORTED:
        break;
    }
    return t->was_prepared ? "TxnState::AbortedAfterPrepare" : "TxnState::AbortedWithoutPrepare";
}

/* A prepare entry recovery replayed whose decision it has not met (yet). */
typedef struct recovered_prepare {
    shl_lsid_t lsid;
    int64_t txn_number;
    uint64_t prepare_ts;
    uint64_t pin_ts; /* the stable timestamp is pinned below it from replay on */
    bson_t ops;      /* every op of the transaction (applyOps' inner form) */
    struct recovered_prepare *next;
} recovered_prepare_t;

struct db_txn_registry {
    shl_storage_engine_t *eng;
    const db_node_t *node;          /* for its cursors (set with the engine) */
    /* Prepare entries replayed without their decision yet: startup recovery's (one thread),
     * then, on a secondary, the oplog applier's (one thread) when a prepare could not be
     * held in storage. */
    recovered_prepare_t *recovered;
    /* Prepared transactions a rollback took out of storage to prepare again once it is done
     * (db_txn_rollback_prepared_after / db_txn_rollback_done): the oplog applier's thread,
     * which runs the rollback, only. */
    recovered_prepare_t *held;
    /* Set once startup recovery handed its prepared transactions over (before the applier
     * starts): from then on a replayed prepare entry is prepared in storage at once and
     * owned by its session, and a decision entry decides it (a secondary). Read-only after. */
    struct db_session_catalog *live;
    pthread_mutex_t mu;             /* guards the list, 'ddls' and each txn's 'active', 'nss' */
    pthread_cond_t ended;           /* a transaction left the list or a DDL ended (with mu) */
    struct {
        char *ns;
        bool db_wide;
    } * ddls; /* DDL operations waiting for the transactions that use their namespaces */
    size_t nddls;
    db_txn_t *head;
    atomic_llong started, committed, aborted, prepared, prepared_committed, prepared_aborted;
    /* Collections the listed transactions created (their 'created' entries): 0 lets every
     * write skip db_txn_wait_created's look under mu. */
    atomic_llong created_open;
};

/* ---------------------------------------------------------------- registry */

db_txn_registry_t *
db_txn_registry_new(shl_storage_engine_t *eng)
{
    db_txn_registry_t *reg = bson_malloc0(sizeof(*reg));

    reg->eng = eng;
    pthread_mutex_init(&reg->mu, NULL);
    pthread_cond_init(&reg->ended, NULL);
    return reg;
}

static void
list_add(db_txn_registry_t *reg, db_txn_t *t)
{
    pthread_mutex_lock(&reg->mu);
    t->prev = NULL;
    t->next = reg->head;
    if (reg->head != NULL) {
        reg->head->prev = t;
    }
    reg->head = t;
    t->listed = true;
    pthread_mutex_unlock(&reg->mu);
    if (reg->node != NULL) {
        db_session_child_open(reg->node->sessions, &t->lsid, true);
    }
}

static void
list_remove(db_txn_registry_t *reg, db_txn_t *t)
{
    bool was;

    pthread_mutex_lock(&reg->mu);
    was = t->listed;
    if (t->listed) {
        if (t->prev != NULL) {
            t->prev->next = t->next;
        } else {
            reg->head = t->next;
        }
        if (t->next != NULL) {
            t->next->prev = t->prev;
        }
        t->listed = false;
    }
    for (size_t i = 0; i < t->nns; i++) {
        bson_free(t->nss[i].ns);
    }
    bson_free(t->nss);
    t->nss = NULL;
    t->nns = 0;
    pthread_cond_broadcast(&reg->ended);
    pthread_mutex_unlock(&reg->mu);
    if (was && reg->node != NULL) {
        db_session_child_open(reg->node->sessions, &t->lsid, false);
    }
}

int64_t
db_txn_started_us(db_txn_registry_t *reg, const shl_lsid_t *lsid, int64_t txn_number)
{
    int64_t started = 0;

    if (reg != NULL) {
        pthread_mutex_lock(&reg->mu);
        for (db_txn_t *t = reg->head; t != NULL && started == 0; t = t->next) {
            if (t->txn_number == txn_number && shl_lsid_equal(&t->lsid, lsid)) {
                started = t->start_mono_us;
            }
        }
        pthread_mutex_unlock(&reg->mu);
    }
    return started;
}

/* Whether 'ns' is 'target', or in database 'target' when db_wide (reg->mu not needed). */
static bool
ns_covers(const char *target, bool db_wide, const char *ns)
{
    size_t n = strlen(target);

    return db_wide ? strncmp(ns, target, n) == 0 && ns[n] == '.' : strcmp(ns, target) == 0;
}

/* The entry of 't' for 'ns' (reg->mu held), or NULL. */
static txn_ns_t *
find_ns_locked(db_txn_t *t, const char *ns)
{
    for (size_t i = 0; i < t->nns; i++) {
        if (strcmp(t->nss[i].ns, ns) == 0) {
            return &t->nss[i];
        }
    }
    return NULL;
}

/* Remember that 't' used 'ns' (and wrote it) (reg->mu held). */
static void
add_ns_locked(db_txn_t *t, const char *ns, bool wrote)
{
    txn_ns_t *e = find_ns_locked(t, ns);

    if (e == NULL) {
        t->nss = bson_realloc(t->nss, (t->nns + 1) * sizeof(*t->nss));
        e = &t->nss[t->nns++];
        e->ns = bson_strdup(ns);
        e->wrote = false;
    }
    e->wrote = e->wrote || wrote;
}

static void
add_ns(db_txn_t *t, const char *ns, bool wrote)
{
    pthread_mutex_lock(&t->reg->mu);
    add_ns_locked(t, ns, wrote);
    pthread_mutex_unlock(&t->reg->mu);
}

/* A DDL operation waiting for the transactions that used 'ns' covers it (reg->mu held). */
static bool
ddl_pending_locked(const db_txn_registry_t *reg, const char *ns)
{
    for (size_t i = 0; i < reg->nddls; i++) {
        if (ns_covers(reg->ddls[i].ns, reg->ddls[i].db_wide, ns)) {
            return true;
        }
    }
    return false;
}

int
db_txn_note_access(const shl_op_ctx_t *op, const char *ns, bool write, shl_status_t *st)
{
    db_txn_t *t = op->txn;
    db_txn_registry_t *reg;
    int ret = 0;
    int64_t limit_ms, deadline_us;

    if (t == NULL) {
        return 0;
    }
    reg = t->reg;
    limit_ms = shl_opt_int(SHL_OPT_maxTransactionLockRequestTimeoutMillis);
    deadline_us = shl_clock_mono_us() + limit_ms * 1000;
    pthread_mutex_lock(&reg->mu);
    /* A namespace the transaction already uses is its own (MongoDB: the lock is held); a new
     * one waits behind a pending DDL operation as a lock request of a transaction does. */
    while (find_ns_locked(t, ns) == NULL && ddl_pending_locked(reg, ns)) {
        int64_t left_ms = (deadline_us - shl_clock_mono_us()) / 1000;
        if (limit_ms >= 0 && left_ms <= 0) {
            ret = shl_status_set(st, SHL_CODE_LOCK_TIMEOUT,
                                 "Unable to acquire %s lock on '%s' within %lldms",
                                 write ? "IX" : "IS", ns, (long long)limit_ms);
            break;
        }
        if ((ret = shl_op_check_interrupt((shl_op_ctx_t *)(uintptr_t)op, st)) != 0) {
            break;
        }
        shl_cond_timedwait_ms(&reg->ended, &reg->mu,
                              limit_ms >= 0 && left_ms < 20 ? left_ms + 1 : 20);
    }
    if (ret == 0) {
        add_ns_locked(t, ns, write);
    }
    pthread_mutex_unlock(&reg->mu);
    return ret;
}

/* Count the open transactions other than 'self' that used 'ns' (wrote it, if writers_only),
 * prepared and not (reg->mu held). */
/* Whether 't' wrote a document of 'ns' that 'range' holds, as far as its observed writes
 * tell (reg->mu held). */
static bool
wrote_in_range_locked(const db_txn_t *t, const char *ns, const db_txn_range_t *range)
{
    bool in = false;

    for (size_t i = 0; i < t->nobs && !in; i++) {
        in = strcmp(t->obs_ns[i], ns) == 0 &&
             ((t->obs_pre[i] != NULL && range->holds(range->arg, t->obs_pre[i])) ||
              (t->obs_post[i] != NULL && range->holds(range->arg, t->obs_post[i])));
    }
    return in;
}

static void
count_users_locked(db_txn_registry_t *reg, const db_txn_t *self, const char *ns, bool db_wide,
                   bool writers_only, const db_txn_range_t *range, int *prepared,
                   int *unprepared)
{
    *prepared = *unprepared = 0;
    for (db_txn_t *t = reg->head; t != NULL; t = t->next) {
        if (t == self || (range != NULL && !wrote_in_range_locked(t, ns, range))) {
            continue;
        }
        for (size_t i = 0; i < t->nns; i++) {
            if (ns_covers(ns, db_wide, t->nss[i].ns) && (t->nss[i].wrote || !writers_only)) {
                if (t->state == TXN_PREPARED) {
                    (*prepared)++;
                } else if (t->state == TXN_IN_PROGRESS) {
                    (*unprepared)++;
                }
                break;
            }
        }
    }
}

/* Wait until no open transaction other than op's uses 'ns' (see count_users_locked);
 * unprepared ones at most unprepared_max_ms (-1: no limit), then LockTimeout. */
static int
wait_users(db_txn_registry_t *reg, shl_op_ctx_t *op, const char *ns, bool db_wide,
           bool writers_only, const db_txn_range_t *range, int64_t unprepared_max_ms,
           shl_status_t *st)
{
    int ret = 0;
    int prepared = 0, unprepared = 0;
    int64_t start_us = shl_clock_mono_us();
    bool logged = false;
    const db_txn_t *self = op != NULL ? op->txn : NULL;

    pthread_mutex_lock(&reg->mu);
    for (;;) {
        count_users_locked(reg, self, ns, db_wide, writers_only, range, &prepared,
                           &unprepared);
        if (prepared == 0 && unprepared == 0) {
            break;
        }
        if (unprepared > 0 && unprepared_max_ms >= 0 &&
            shl_clock_mono_us() - start_us >= unprepared_max_ms * 1000) {
            ret = shl_status_set(st, SHL_CODE_LOCK_TIMEOUT,
                                 "Timed out after %lld ms waiting for %d open transaction(s) "
                                 "that wrote %s to end",
                                 (long long)unprepared_max_ms, unprepared, ns);
            break;
        }
        if (!logged) {
            logged = true;
            SHL_LOG_INFO(TXN, 5100307, "waiting for transactions that use the namespace", "ns",
                         BCON_UTF8(ns), "prepared", BCON_INT32(prepared), "inProgress",
                         BCON_INT32(unprepared), "writersOnly", BCON_BOOL(writers_only));
        }
        if (op != NULL && (ret = shl_op_check_interrupt(op, st)) != 0) {
            break;
        }
        shl_cond_timedwait_ms(&reg->ended, &reg->mu, 20);
    }
    pthread_mutex_unlock(&reg->mu);
    return ret;
}

int
db_txn_wait_writers(db_txn_registry_t *reg, shl_op_ctx_t *op, const char *ns,
                    const db_txn_range_t *range, int64_t unprepared_max_ms, shl_status_t *st)
{
    return reg == NULL ? 0 : wait_users(reg, op, ns, false, true, range, unprepared_max_ms, st);
}

int
db_txn_ddl_begin(db_txn_registry_t *reg, shl_op_ctx_t *op, const char *ns, bool db_wide,
                 shl_status_t *st)
{
    int ret = 0;

    if (reg == NULL) {
        return 0;
    }
    pthread_mutex_lock(&reg->mu);
    reg->ddls = bson_realloc(reg->ddls, (reg->nddls + 1) * sizeof(*reg->ddls));
    reg->ddls[reg->nddls].ns = bson_strdup(ns);
    reg->ddls[reg->nddls].db_wide = db_wide;
    reg->nddls++;
    pthread_mutex_unlock(&reg->mu);
    ret = wait_users(reg, op, ns, db_wide, false, NULL, -1, st);
    if (ret != 0) {
        db_txn_ddl_end(reg, ns, db_wide);
    }
    return ret;
}

void
db_txn_ddl_end(db_txn_registry_t *reg, const char *ns, bool db_wide)
{
    if (reg == NULL) {
        return;
    }
    pthread_mutex_lock(&reg->mu);
    for (size_t i = 0; i < reg->nddls; i++) {
        if (reg->ddls[i].db_wide == db_wide && strcmp(reg->ddls[i].ns, ns) == 0) {
            bson_free(reg->ddls[i].ns);
            reg->ddls[i] = reg->ddls[reg->nddls - 1];
            reg->nddls--;
            break;
        }
    }
    pthread_cond_broadcast(&reg->ended);
    pthread_mutex_unlock(&reg->mu);
}

static db_node_t *node_of(const shl_op_ctx_t *op);

static void
drop_answers(db_txn_t *t)
{
    for (size_t i = 0; i < t->nans; i++) {
        bson_destroy(t->ans[i]);
    }
    bson_free(t->ans);
    bson_free(t->ans_ids);
    t->ans = NULL;
    t->ans_ids = NULL;
    t->nans = t->capans = 0;
}

bool
db_txn_records_stmts(const shl_op_ctx_t *op)
{
    return op->txn != NULL && op->lsid_key.child && op->lsid_key.has_parent_txn_number;
}

void
db_txn_note_stmt(const shl_op_ctx_t *op, int32_t stmt_id, const bson_t *answer)
{
    db_txn_t *t = op->txn;

    if (!db_txn_records_stmts(op) || stmt_id < 0) {
        return;
    }
    if (t->nans == t->capans) {
        t->capans = t->capans != 0 ? t->capans * 2 : 4;
        t->ans = bson_realloc(t->ans, t->capans * sizeof(*t->ans));
        t->ans_ids = bson_realloc(t->ans_ids, t->capans * sizeof(*t->ans_ids));
    }
    t->ans_ids[t->nans] = stmt_id;
    t->ans[t->nans] = bson_copy(answer);
    if (!bson_has_field(answer, "rdoc") && t->nobs > 0) {
        /* The document it wrote, last observed: a migration of its range takes it along. */
        const bson_t *doc = t->obs_post[t->nobs - 1] != NULL ? t->obs_post[t->nobs - 1]
                                                             : t->obs_pre[t->nobs - 1];
        BSON_APPEND_UTF8(t->ans[t->nans], "ns", t->obs_ns[t->nobs - 1]);
        if (doc != NULL) {
            BSON_APPEND_DOCUMENT(t->ans[t->nans], "rdoc", doc);
        }
    }
    t->nans++;
}

/* t->state = to, telling the session catalog when the transaction enters or leaves the
 * prepared state (db_session_txn_prepared). */
static void
txn_set_state(db_txn_t *t, txn_state_t to)
{
    bool was = t->state == TXN_PREPARED, is = to == TXN_PREPARED;

    t->state = to;
    if (was != is && t->reg->node != NULL) {
        db_session_txn_prepared(t->reg->node->sessions, &t->lsid, t->txn_number, is);
    }
}

/* The transaction committed at entry 'ts': its parent session learns its statements. */
static void
publish_answers(db_txn_t *t, uint64_t ts)
{
    if (t->nans > 0 && t->reg->node != NULL) {
        db_session_child_commit(t->reg->node->sessions, &t->lsid, ts, t->ans_ids, t->ans,
                                t->nans);
    }
    drop_answers(t);
}

static void
drop_observed(db_txn_t *t)
{
    char **ns;
    bson_t **pre, **post;
    size_t n;

    /* Taken off under reg->mu: a migration's wait reads them (count_users_locked). */
    pthread_mutex_lock(&t->reg->mu);
    ns = t->obs_ns;
    pre = t->obs_pre;
    post = t->obs_post;
    n = t->nobs;
    t->obs_ns = NULL;
    t->obs_pre = t->obs_post = NULL;
    t->nobs = t->capobs = 0;
    pthread_mutex_unlock(&t->reg->mu);
    for (size_t i = 0; i < n; i++) {
        bson_free(ns[i]);
        if (pre[i] != NULL) {
            bson_destroy(pre[i]);
        }
        if (post[i] != NULL) {
            bson_destroy(post[i]);
        }
    }
    bson_free(ns);
    bson_free(pre);
    bson_free(post);
}

void
db_txn_note_write(const shl_op_ctx_t *op, const char *ns, const bson_t *pre, const bson_t *post)
{
    db_txn_t *t = op->txn;

    if (t == NULL) {
        return;
    }
    pthread_mutex_lock(&t->reg->mu); /* a migration's wait reads them (count_users_locked) */
    if (t->nobs == t->capobs) {
        t->capobs = t->capobs ? t->capobs * 2 : 8;
        t->obs_ns = bson_realloc(t->obs_ns, t->capobs * sizeof(*t->obs_ns));
        t->obs_pre = bson_realloc(t->obs_pre, t->capobs * sizeof(*t->obs_pre));
        t->obs_post = bson_realloc(t->obs_post, t->capobs * sizeof(*t->obs_post));
    }
    t->obs_ns[t->nobs] = bson_strdup(ns);
    t->obs_pre[t->nobs] = pre != NULL ? bson_copy(pre) : NULL;
    t->obs_post[t->nobs] = post != NULL ? bson_copy(post) : NULL;
    t->nobs++;
    pthread_mutex_unlock(&t->reg->mu);
}

/* The transaction committed: the shard role learns its observed writes. */
static void
report_observed(const shl_op_ctx_t *op, db_txn_t *t)
{
    const db_node_t *node = op != NULL ? node_of(op) : NULL;

    if (node != NULL && node->sharding.on_write != NULL) {
        for (size_t i = 0; i < t->nobs; i++) {
            node->sharding.on_write(node->sharding.arg, t->obs_ns[i], t->obs_pre[i],
                                    t->obs_post[i]);
        }
    }
    drop_observed(t);
}

void
db_txn_note_created(const shl_op_ctx_t *op, const char *ns)
{
    db_txn_t *t = op->txn;

    if (t == NULL) {
        return;
    }
    for (size_t i = 0; i < t->ncreated; i++) {
        if (strcmp(t->created[i], ns) == 0) {
            return;
        }
    }
    pthread_mutex_lock(&t->reg->mu);
    t->created = bson_realloc(t->created, (t->ncreated + 1) * sizeof(*t->created));
    t->created[t->ncreated++] = bson_strdup(ns);
    atomic_fetch_add(&t->reg->created_open, 1);
    pthread_mutex_unlock(&t->reg->mu);
}

/* With reg->mu held: whether an open transaction other than 'self' created 'ns'. */
static bool
created_by_other_locked(const db_txn_registry_t *reg, const db_txn_t *self, const char *ns)
{
    bool other = false;

    for (const db_txn_t *t = reg->head; t != NULL && !other; t = t->next) {
        for (size_t i = 0; t != self && i < t->ncreated && !other; i++) {
            other = strcmp(t->created[i], ns) == 0;
        }
    }
    return other;
}

bool
db_txn_ns_hidden(const shl_op_ctx_t *op, const char *ns)
{
    const db_node_t *node = op->svc->role_state;
    db_txn_registry_t *reg = node != NULL ? node->txns : NULL;
    bool hidden = false;

    if (reg == NULL || atomic_load(&reg->created_open) == 0) {
        return false;
    }
    pthread_mutex_lock(&reg->mu);
    hidden = created_by_other_locked(reg, op->txn, ns);
    pthread_mutex_unlock(&reg->mu);
    return hidden;
}

int
db_txn_wait_created(shl_op_ctx_t *op, const char *ns, shl_status_t *st)
{
    const db_node_t *node = op->svc->role_state;
    db_txn_registry_t *reg = node != NULL ? node->txns : NULL;
    int64_t limit_ms = -1, deadline_us = 0;
    int ret = 0;

    if (reg == NULL || atomic_load(&reg->created_open) == 0) {
        return 0;
    }
    if (op->txn != NULL) {
        limit_ms = shl_opt_int(SHL_OPT_maxTransactionLockRequestTimeoutMillis);
        deadline_us = shl_clock_mono_us() + limit_ms * 1000;
    }
    pthread_mutex_lock(&reg->mu);
    while (created_by_other_locked(reg, op->txn, ns)) {
        int64_t left_ms = (deadline_us - shl_clock_mono_us()) / 1000;
        if (limit_ms >= 0 && left_ms <= 0) {
            ret = shl_status_set(st, SHL_CODE_LOCK_TIMEOUT,
                                 "Unable to acquire IX lock on '%s' within %lldms", ns,
                                 (long long)limit_ms);
            break;
        }
        if ((ret = shl_op_check_interrupt(op, st)) != 0) {
            break;
        }
        shl_cond_timedwait_ms(&reg->ended, &reg->mu,
                              limit_ms >= 0 && left_ms < 20 ? left_ms + 1 : 20);
    }
    pthread_mutex_unlock(&reg->mu);
    return ret;
}

/* Forget the collections the transaction created: committed ('commit_ts' nonzero), they are
 * visible from the commit timestamp on; aborted, their pending catalog entries and tables
 * went with the storage transaction (shl_catalog_create_collection_in_txn). Other writers
 * wait while they are listed (db_txn_wait_created); only the owner changes the list, so
 * reading it here needs no lock. */
static void
end_created(db_txn_t *t, uint64_t commit_ts)
{
    char **created;
    size_t ncreated;

    for (size_t i = 0; commit_ts != 0 && i < t->ncreated; i++) {
        /* A snapshot read before the commit must not read the collection: SnapshotUnavailable,
         * as for any collection created after the read's time. */
        shl_collection_t *coll = shl_catalog_get(t->reg->eng, t->created[i]);
        if (coll != NULL) {
            shl_catalog_raise_min_visible(t->reg->eng, t->created[i], coll->uuid, commit_ts);
        }
        shl_collection_release(coll);
    }
    pthread_mutex_lock(&t->reg->mu);
    created = t->created;
    ncreated = t->ncreated;
    t->created = NULL;
    t->ncreated = 0;
    atomic_fetch_sub(&t->reg->created_open, (long long)ncreated);
    pthread_cond_broadcast(&t->reg->ended);
    pthread_mutex_unlock(&t->reg->mu);
    for (size_t i = 0; i < ncreated; i++) {
        bson_free(created[i]);
    }
    bson_free(created);
}

/* Roll back the storage transaction of 't' (prepared or not) and take it off the list. */
static void
txn_release(db_txn_t *t)
{
    drop_observed(t);
    drop_answers(t);
    if (t->stxn != NULL) {
        shl_storage_txn_abort(t->stxn);
        t->stxn = NULL;
    }
    /* Whatever is still listed here did not commit. */
    end_created(t, 0);
    if (t->pin_ts != 0) {
        shl_storage_unpin_stable(t->reg->eng, t->pin_ts);
        t->pin_ts = 0;
    }
    if (t->prepare_ts != 0) {
        t->prepare_ts = 0;
    }
    list_remove(t->reg, t);
}

void
db_txn_discard(db_txn_registry_t *reg, db_txn_t *t)
{
    (void)reg;
    if (t != NULL) {
        txn_release(t);
        bson_free(t);
    }
}

bool
db_txn_is_open(const db_txn_t *t)
{
    return t != NULL && (t->state == TXN_IN_PROGRESS || t->state == TXN_PREPARED);
}

void
db_txn_free(db_txn_t *t)
{
    if (t != NULL) {
        SHL_INVARIANT(t->stxn == NULL && !t->listed && t->ncreated == 0 && t->nobs == 0);
        drop_answers(t);
        bson_free(t);
    }
}

void
db_txn_registry_destroy(db_txn_registry_t *reg)
{
    if (reg == NULL) {
        return;
    }
    /* Shutdown: every connection is gone; what is still open is rolled back (a prepared
     * transaction comes back from the oplog at the next start). */
    while (reg->head != NULL) {
        db_txn_t *t = reg->head;
        end_created(t, 0); /* a prepared one comes back with them */
        /* A prepared one keeps the stable timestamp pinned: the final checkpoint stays below
         * its prepare entry, which the next start replays to prepare it again. */
        t->pin_ts = 0;
        txn_release(t);
        txn_set_state(t, TXN_ABORTED);
    }
    while (reg->recovered != NULL) {
        recovered_prepare_t *r = reg->recovered;
        reg->recovered = r->next;
        bson_destroy(&r->ops);
        bson_free(r);
    }
    for (size_t i = 0; i < reg->nddls; i++) {
        bson_free(reg->ddls[i].ns);
    }
    bson_free(reg->ddls);
    pthread_mutex_destroy(&reg->mu);
    pthread_cond_destroy(&reg->ended);
    bson_free(reg);
}

void
db_txn_registry_set_engine(db_txn_registry_t *reg, shl_storage_engine_t *eng, const db_node_t *node)
{
    reg->eng = eng;
    reg->node = node;
}

static db_node_t *
node_of(const shl_op_ctx_t *op)
{
    return op->svc->role_state;
}

/* Kill the cursors the transaction opened: they read in its storage transaction. */
static void
kill_cursors(const shl_op_ctx_t *op, db_txn_t *t)
{
    db_node_t *node = node_of(op);

    if (node != NULL && node->cursors != NULL) {
        shl_cursor_manager_kill_txn(node->cursors, &t->lsid, t->txn_number);
    }
}

/* Abort an unprepared transaction (its cursors die with it). */
static void
abort_unprepared(const shl_op_ctx_t *op, db_txn_t *t)
{
    if (t->state != TXN_IN_PROGRESS) {
        return;
    }
    if (op != NULL) {
        kill_cursors(op, t);
    }
    txn_release(t);
    txn_set_state(t, TXN_ABORTED);
    atomic_fetch_add(&t->reg->aborted, 1);
}

/* ---------------------------------------------------------------- statements */

static bool transient_error(int code, bool decision);

/* The commands MongoDB runs inside a transaction. */
static bool
allowed_in_txn(const char *name)
{
    static const char *const names[] = {"abortTransaction",
                                        "aggregate",
                                        "commitTransaction",
                                        "coordinateCommitTransaction",
                                        "create",
                                        "createIndexes",
                                        "delete",
                                        "distinct",
                                        "find",
                                        "findandmodify",
                                        "findAndModify",
                                        "getMore",
                                        "insert",
                                        "killCursors",
                                        "prepareTransaction",
                                        "update",
                                        "dbHash",
                                        NULL};

    for (size_t i = 0; names[i] != NULL; i++) {
        if (strcmp(names[i], name) == 0) {
            return true;
        }
    }
    return false;
}

static bool
is_decision_cmd(const char *name)
{
    return strcmp(name, "commitTransaction") == 0 || strcmp(name, "abortTransaction") == 0 ||
           strcmp(name, "prepareTransaction") == 0 ||
           strcmp(name, "coordinateCommitTransaction") == 0;
}

/* The read timestamp of a new transaction from its readConcern ('rc' may be NULL). */
static int
choose_read_ts(db_txn_registry_t *reg, shl_op_ctx_t *op, const bson_t *rc, db_txn_t *t,
               shl_status_t *st)
{
    bson_iter_t it;
    const char *level = "local";
    int ret = 0;

    if (rc != NULL && bson_iter_init_find(&it, rc, "level") && BSON_ITER_HOLDS_UTF8(&it)) {
        level = bson_iter_utf8(&it, NULL);
    }
    if (strcmp(level, "local") != 0 && strcmp(level, "majority") != 0 &&
        strcmp(level, "snapshot") != 0) {
        SHL_FAIL(st, SHL_CODE_INVALID_OPTIONS,
                 "The readConcern level must be either 'local' (default), 'majority' or "
                 "'snapshot' in order to run in a transaction");
    }
    shl_str_copy(t->level, sizeof(t->level), level);
    if (rc != NULL && bson_iter_init_find(&it, rc, "atClusterTime")) {
        if (strcmp(level, "snapshot") != 0) {
            SHL_FAIL(st, SHL_CODE_INVALID_OPTIONS,
                     "readConcern.atClusterTime is only valid with level 'snapshot'");
        }
        if (!BSON_ITER_HOLDS_TIMESTAMP(&it)) {
            SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH, "atClusterTime must be a Timestamp");
        }
        t->read_ts = shl_bson_iter_timestamp_u64(&it);
        if (t->read_ts == 0) {
            SHL_FAIL(st, SHL_CODE_INVALID_OPTIONS, "readConcern.atClusterTime cannot be null");
        }
        /* A time this node has not reached yet: the clock moves there and the snapshot
         * waits for the writes in flight below it (as a snapshot read outside one). */
        SHL_ERR(db_rc_wait_committed(op, t->read_ts, st));
    } else {
        if (rc != NULL && bson_iter_init_find(&it, rc, "afterClusterTime") &&
            BSON_ITER_HOLDS_TIMESTAMP(&it) && shl_bson_iter_timestamp_u64(&it) != 0) {
            /* Causal consistency: the snapshot is taken once the time is committed here. */
            SHL_ERR(db_rc_wait_after_cluster_time(op, shl_bson_iter_timestamp_u64(&it), st));
        }
    }
    if (t->read_ts == 0 && strcmp(level, "local") != 0) {
        /* On a set of one the majority point is the no-holes point. */
        t->read_ts = shl_storage_all_durable(reg->eng);
    }
done:
    return ret;
}

/* The sessions of the open transactions 'pick' chooses, collected under reg->mu. */
typedef struct lsid_list {
    shl_lsid_t *v;
    int64_t *txn;
    size_t n, cap;
} lsid_list_t;

static void collect(db_txn_registry_t *reg, bool (*pick)(void *arg, const db_txn_t *t), void *arg,
                    lsid_list_t *out);
static int abort_listed(db_txn_registry_t *reg, db_session_catalog_t *cat, shl_service_ctx_t *svc,
                        const lsid_list_t *l, const char *why);

/* Whether open transaction 't' is another attempt of the retryable write of child session
 * 'arg' (same parent, same parent txnNumber, another txnUUID). */
static bool
other_attempt(void *arg, const db_txn_t *t)
{
    const shl_lsid_t *child = arg;
    shl_lsid_t a, b;

    if (!t->lsid.child || !t->lsid.has_parent_txn_number ||
        t->lsid.parent_txn_number != child->parent_txn_number || shl_lsid_equal(&t->lsid, child)) {
        return false;
    }
    shl_lsid_parent(&t->lsid, &a);
    shl_lsid_parent(child, &b);
    return shl_lsid_equal(&a, &b);
}

/*
 * A transaction starts on retryable child session 'child': the first time it meets another
 * attempt of the same write still open and unprepared, that attempt is aborted (MongoDB 7.0:
 * RetryableTransactionInProgress is raised only on later conflicts; the first one assumes the
 * other attempt's client gave up). A prepared attempt, or one whose session runs a statement
 * right now, is left to end by itself: db_session_child_begin waits for it.
 */
static void
abort_other_attempts(db_txn_registry_t *reg, shl_op_ctx_t *op, const shl_lsid_t *child)
{
    lsid_list_t l = {0};
    shl_lsid_t key = *child;

    if (reg->node != NULL && child->child && child->has_parent_txn_number) {
        collect(reg, other_attempt, &key, &l);
        if (l.n > 0 && db_session_child_conflict_claim(reg->node->sessions, child)) {
            (void)abort_listed(reg, reg->node->sessions, op->svc, &l,
                               "a retry of its retryable write started another attempt");
        }
    }
    bson_free(l.v);
    bson_free(l.txn);
}

static int
start_txn(db_txn_registry_t *reg, shl_op_ctx_t *op, db_session_t *s, shl_status_t *st)
{
    db_txn_t *t = bson_malloc0(sizeof(*t));
    shl_storage_txn_opts_t o = {0};
    int ret = 0;

    abort_other_attempts(reg, op, db_session_lsid(s));
    /* A retryable internal transaction of an older write of its parent is refused. */
    SHL_ERR(db_session_child_begin(reg->node != NULL ? reg->node->sessions : NULL, op,
                                   db_session_lsid(s), st));
    t->reg = reg;
    t->session = s;
    t->lsid = *db_session_lsid(s);
    t->txn_number = op->txn_number;
    txn_set_state(t, TXN_IN_PROGRESS);
    t->start_wall_ms = shl_clock_wall_ms();
    t->start_mono_us = shl_clock_mono_us();
    t->last_active_mono_us = t->start_mono_us;
    SHL_ERR(choose_read_ts(reg, op, op->has_read_concern ? &op->read_concern : NULL, t, st));
    o.read_timestamp = t->read_ts;
    SHL_ERR(shl_storage_txn_begin(reg->eng, &o, &t->stxn, st));
    shl_storage_txn_set_multi(t->stxn, true);
    list_add(reg, t);
    atomic_fetch_add(&reg->started, 1);
    *db_session_txn_slot(s) = t;
    db_session_set_txn_number(s, op->txn_number);
    t = NULL;
done:
    if (t != NULL) {
        bson_free(t);
    }
    return ret;
}

/* Whether the session's config.transactions record says transaction n committed. */
static bool
committed_before(db_txn_registry_t *reg, db_session_t *s, int64_t n)
{
    shl_collection_t *tc = shl_catalog_get(reg->eng, DB_TRANSACTIONS_NS);
    shl_storage_txn_t *txn = NULL;
    shl_status_t st = SHL_STATUS_INIT;
    bson_t key = BSON_INITIALIZER, rec = BSON_INITIALIZER;
    bson_iter_t it;
    int64_t rid = 0;
    bool found = false, committed = false;

    if (tc != NULL && shl_storage_txn_begin(reg->eng, NULL, &txn, &st) == 0) {
        shl_lsid_append(&key, "_id", db_session_lsid(s));
        bson_iter_init_find(&it, &key, "_id");
        bson_destroy(&rec);
        if (shl_doc_find_by_id(txn, tc, bson_iter_value(&it), &rec, &rid, &found, &st) == 0 &&
            found && shl_bson_int64_at(&rec, "txnNum") == n &&
            bson_iter_init_find(&it, &rec, "state") && BSON_ITER_HOLDS_UTF8(&it)) {
            committed = strcmp(bson_iter_utf8(&it, NULL), "committed") == 0;
        }
        shl_storage_txn_abort(txn);
    }
    shl_collection_release(tc);
    bson_destroy(&key);
    bson_destroy(&rec);
    return committed;
}

static void
no_such_txn(shl_status_t *st, int64_t n, const db_txn_t *t)
{
    if (t != NULL && t->txn_number == n && t->state == TXN_ABORTED) {
        shl_status_set(st, SHL_CODE_NO_SUCH_TRANSACTION,
                       "Transaction with { txnNumber: %lld } has been aborted.", (long long)n);
    } else {
        shl_status_set(st, SHL_CODE_NO_SUCH_TRANSACTION,
                       "Given transaction number %lld does not match any in-progress "
                       "transactions. The active transaction number is %lld",
                       (long long)n, t != NULL ? (long long)t->txn_number : -1LL);
    }
}

/*
 * MongoDB 7.0's DDL in a transaction: create, and createIndexes on a collection this
 * transaction created (or that does not exist yet: it creates it). Notes the namespace for
 * the statement's end.
 */
static int
check_ddl(db_txn_registry_t *reg, const shl_op_ctx_t *op, db_txn_t *t, const char *name,
          shl_status_t *st)
{
    bson_iter_t it;
    shl_collection_t *coll;
    bool mine = false;
    int ret = 0;

    if (!bson_iter_init(&it, op->body) || !bson_iter_next(&it) || !BSON_ITER_HOLDS_UTF8(&it)) {
        goto done; /* the command reports its own parse error */
    }
    snprintf(t->ddl_ns, sizeof(t->ddl_ns), "%s.%s", op->db, bson_iter_utf8(&it, NULL));
    coll = shl_catalog_get(reg->eng, t->ddl_ns);
    t->ddl_existed = coll != NULL;
    shl_collection_release(coll);
    for (size_t i = 0; i < t->ncreated; i++) {
        mine = mine || strcmp(t->created[i], t->ddl_ns) == 0;
    }
    if (strcmp(name, "createIndexes") == 0 && t->ddl_existed && !mine) {
        SHL_FAIL(st, SHL_CODE_OPERATION_NOT_SUPPORTED_IN_TRANSACTION,
                 "Cannot create new indexes on existing collection %s in a multi-document "
                 "transaction.",
                 t->ddl_ns);
    }
done:
    return ret;
}

int
db_txn_statement_begin(db_txn_registry_t *reg, shl_op_ctx_t *op, const shl_command_t *cmd,
                       void *session, shl_status_t *st)
{
    db_session_t *s = session;
    db_txn_t *t = *db_session_txn_slot(s);
    int64_t n = op->txn_number, cur = db_session_txn_number(s);
    char id[37];
    int ret = 0;

    shl_lsid_id_string(db_session_lsid(s), id);
    if (op->autocommit) {
        SHL_FAIL(st, SHL_CODE_INVALID_OPTIONS, "Specifying autocommit=true is not allowed.");
    }
    if (!op->has_txn_number) {
        SHL_FAIL(st, SHL_CODE_INVALID_OPTIONS,
                 "'autocommit' field requires a transaction number to also be specified");
    }
    if (!allowed_in_txn(cmd->name)) {
        SHL_FAIL(st, SHL_CODE_OPERATION_NOT_SUPPORTED_IN_TRANSACTION,
                 "Cannot run '%s' in a multi-document transaction.", cmd->name);
    }
    if (op->has_write_concern && !is_decision_cmd(cmd->name)) {
        SHL_FAIL(st, SHL_CODE_INVALID_OPTIONS,
                 "writeConcern is not allowed within a multi-statement transaction");
    }
    if (n < cur) {
        SHL_FAIL(st, SHL_CODE_TRANSACTION_TOO_OLD,
                 "Cannot start transaction with { txnNumber: %lld, txnRetryCounter: 0 } on "
                 "session %s because a newer %s with txnNumberAndRetryCounter { txnNumber: %lld, "
                 "txnRetryCounter: 0 } has already started on this session.",
                 (long long)n, id,
                 t != NULL && t->txn_number == cur ? "transaction" : "retryable write",
                 (long long)cur);
    }
    if (op->start_transaction) {
        /* The same number again: a restart of one aborted before its prepare (or of a number
         * a retryable write used) is allowed, as in MongoDB 7.0. */
        if (t != NULL && t->txn_number == n && !(t->state == TXN_ABORTED && !t->was_prepared)) {
            SHL_FAIL(st, 50911,
                     "Cannot start a transaction with session id %s and transaction number { "
                     "txnNumber: %lld, txnRetryCounter: 0 } because a transaction with the same "
                     "transaction number is in state %s",
                     id, (long long)n, state_name(t));
        }
        if (t != NULL && t->state == TXN_PREPARED) {
            SHL_FAIL(st, SHL_CODE_PREPARED_TRANSACTION_IN_PROGRESS,
                     "Cannot start transaction %lld on session %s because a prepared "
                     "transaction %lld is in progress",
                     (long long)n, id, (long long)t->txn_number);
        }
        if (t != NULL) {
            abort_unprepared(op, t);
            db_txn_discard(reg, t);
            *db_session_txn_slot(s) = NULL;
        }
        SHL_ERR(start_txn(reg, op, s, st));
        t = *db_session_txn_slot(s);
    } else {
        if (op->has_read_concern) {
            SHL_FAIL(st, SHL_CODE_INVALID_OPTIONS,
                     "Only the first command in a transaction may specify a readConcern");
        }
        if ((t == NULL || t->txn_number != n) && n == cur && !db_txn_is_open(t) &&
            committed_before(reg, s, n)) {
            /* Committed before a restart (or before the session left the catalog): its
             * record says so, and a retried commitTransaction answers from it. */
            if (t != NULL) {
                db_txn_discard(reg, t);
            }
            t = bson_malloc0(sizeof(*t));
            t->reg = reg;
            t->session = s;
            t->lsid = *db_session_lsid(s);
            t->txn_number = n;
            txn_set_state(t, TXN_COMMITTED);
            *db_session_txn_slot(s) = t;
        }
        if (t == NULL || t->txn_number != n) {
            no_such_txn(st, n, t);
            SHL_ERR(st->code);
        }
        if (t->state == TXN_ABORTED) {
            no_such_txn(st, n, t);
            SHL_ERR(st->code);
        }
        if (t->state == TXN_COMMITTED && strcmp(cmd->name, "commitTransaction") != 0) {
            SHL_FAIL(st, SHL_CODE_TRANSACTION_COMMITTED,
                     "Transaction with { txnNumber: %lld } has been committed.", (long long)n);
        }
        if (t->state == TXN_PREPARED && !is_decision_cmd(cmd->name)) {
            SHL_FAIL(st, SHL_CODE_PREPARED_TRANSACTION_IN_PROGRESS,
                     "Cannot call any operation other than abort, prepare or commit on a "
                     "prepared transaction");
        }
    }
    t->ddl_ns[0] = '\0';
    if (strcmp(cmd->name, "create") == 0 || strcmp(cmd->name, "createIndexes") == 0) {
        SHL_ERR(check_ddl(reg, op, t, cmd->name, st));
    }
    pthread_mutex_lock(&reg->mu);
    t->active = true;
    pthread_mutex_unlock(&reg->mu);
    t->last_active_mono_us = shl_clock_mono_us();
    /* currentOp reads op->txn under ops_mu (db_txn_append_op_info). */
    pthread_mutex_lock(&op->svc->ops_mu);
    op->txn = t;
    pthread_mutex_unlock(&op->svc->ops_mu);
    /* The statement sees the collections the transaction created (pending in it). */
    shl_catalog_set_txn_view(&t->stxn);
    /* The transaction owns the readConcern: the commands read in its snapshot. */
    op->has_read_concern = false;
done:
    if (ret != 0 && transient_error(ret, is_decision_cmd(cmd->name))) {
        shl_status_add_label(st, SHL_LABEL(TRANSIENT_TRANSACTION_ERROR));
    }
    return ret;
}

/* MongoDB's isTransientTransactionError: an error of a transaction's command after which
 * retrying the whole transaction is safe ('decision': commit/abort, which here never carry
 * a writeConcern error on a set of one). */
static bool
transient_error(int code, bool decision)
{
    bool transient = code == SHL_CODE_WRITE_CONFLICT || code == SHL_CODE_LOCK_TIMEOUT ||
                     code == SHL_CODE_PREPARED_TRANSACTION_IN_PROGRESS ||
                     shl_code_in_category(code, SHL_CAT_SNAPSHOT_ERROR) ||
                     shl_code_in_category(code, SHL_CAT_NEED_RETARGETTING_ERROR) ||
                     code == SHL_CODE_STALE_DB_VERSION || code == SHL_CODE_NO_SUCH_TRANSACTION;

    if (!decision) {
        transient = transient || shl_code_in_category(code, SHL_CAT_RETRIABLE_ERROR);
    }
    return transient;
}

int
db_txn_statement_end(db_txn_registry_t *reg, shl_op_ctx_t *op, int ret, shl_status_t *st,
                     const bson_t *reply)
{
    db_txn_t *t = op->txn;
    /* WouldChangeOwningShard ran nothing: the router moves the document in this transaction. */
    bool failed = ret != 0 && ret != SHL_CODE_WOULD_CHANGE_OWNING_SHARD, decision;
    bson_iter_t it, e, f;

    shl_catalog_set_txn_view(NULL);
    if (t == NULL) {
        return ret;
    }
    decision = is_decision_cmd(op->cmd_name);
    if (!failed && reply != NULL && bson_iter_init_find(&it, reply, "writeErrors") &&
        BSON_ITER_HOLDS_ARRAY(&it) && bson_iter_recurse(&it, &e)) {
        /* A transient write error fails the command as a whole in a transaction. */
        while (bson_iter_next(&e)) {
            int32_t code = 0;
            const char *msg = "";
            bson_iter_t sub;
            if (!BSON_ITER_HOLDS_DOCUMENT(&e) || !bson_iter_recurse(&e, &sub)) {
                continue;
            }
            f = sub;
            if (bson_iter_find(&f, "code")) {
                code = bson_iter_as_int64(&f) > INT32_MAX ? 0 : (int32_t)bson_iter_as_int64(&f);
            }
            f = sub;
            if (bson_iter_find(&f, "errmsg") && BSON_ITER_HOLDS_UTF8(&f)) {
                msg = bson_iter_utf8(&f, NULL);
            }
            if (code == SHL_CODE_WOULD_CHANGE_OWNING_SHARD) {
                continue; /* nothing ran: the router moves the document in this transaction */
            }
            failed = true;
            if (code != 0 && st != NULL && transient_error(code, false)) {
                ret = shl_status_set(st, code, "%s", msg);
                break;
            }
        }
    }
    if (!failed && t->ddl_ns[0] != '\0' && !t->ddl_existed) {
        db_txn_note_created(op, t->ddl_ns);
    }
    t->ddl_ns[0] = '\0';
    if (failed && !decision) {
        abort_unprepared(op, t);
    }
    if (ret != 0 && st != NULL && transient_error(ret, decision)) {
        shl_status_add_label(st, SHL_LABEL(TRANSIENT_TRANSACTION_ERROR));
    }
    pthread_mutex_lock(&reg->mu);
    t->active = false;
    pthread_mutex_unlock(&reg->mu);
    t->last_active_mono_us = shl_clock_mono_us();
    /* A finished transaction keeps its state (a commit retried answers from it) but no
     * storage resources. */
    pthread_mutex_lock(&op->svc->ops_mu);
    op->txn = NULL;
    pthread_mutex_unlock(&op->svc->ops_mu);
    return ret;
}

shl_storage_txn_t *
db_txn_storage(const shl_op_ctx_t *op)
{
    const db_txn_t *t = op->txn;

    return t != NULL && t->state == TXN_IN_PROGRESS ? t->stxn : NULL;
}

uint64_t
db_txn_read_ts(const shl_op_ctx_t *op)
{
    const db_txn_t *t = op->txn;

    return t != NULL ? t->read_ts : 0;
}

uint64_t
db_txn_read_ts_for(const shl_op_ctx_t *op, const char *ns)
{
    const db_txn_t *t = op->txn;
    uint64_t ts = t != NULL ? t->read_ts : 0;

    /* t->created is written only by the transaction's own statements (this thread). */
    for (size_t i = 0; ts != 0 && i < t->ncreated; i++) {
        if (strcmp(t->created[i], ns) == 0) {
            ts = 0;
        }
    }
    return ts;
}

int64_t
db_txn_session_number(void *session)
{
    const db_txn_t *t = *db_session_txn_slot(session);

    return t != NULL ? t->txn_number : -1;
}

bool
db_txn_session_prepared(void *session)
{
    const db_txn_t *t = *db_session_txn_slot(session);

    return t != NULL && t->state == TXN_PREPARED;
}

bool
db_txn_abort_for_session(db_txn_registry_t *reg, void *session)
{
    db_session_t *s = session;
    db_txn_t *t = *db_session_txn_slot(s);
    bool done = false;

    (void)reg;
    if (t != NULL && t->state == TXN_IN_PROGRESS) {
        /* Cursors of an aborted transaction are killed by the caller's session kill. */
        txn_release(t);
        txn_set_state(t, TXN_ABORTED);
        atomic_fetch_add(&t->reg->aborted, 1);
        done = true;
    }
    return done;
}

/* ---------------------------------------------------------------- oplog entries */

/* {ts, t} as field 'key'. */
static void
append_optime(bson_t *doc, const char *key, uint64_t ts, int64_t term)
{
    bson_t sub;

    BSON_APPEND_DOCUMENT_BEGIN(doc, key, &sub);
    shl_bson_append_timestamp_u64(&sub, "ts", ts);
    BSON_APPEND_INT64(&sub, "t", term);
    bson_append_document_end(doc, &sub);
}

/* The session fields of a transaction's entry: lsid, txnNumber, prevOpTime. */
static void
entry_fields(bson_t *out, const db_txn_t *t, uint64_t prev_ts, int64_t term)
{
    bson_init(out);
    shl_lsid_append(out, "lsid", &t->lsid);
    BSON_APPEND_INT64(out, "txnNumber", t->txn_number);
    append_optime(out, "prevOpTime", prev_ts, prev_ts != 0 ? term : -1);
}

/*
 * Write the transaction's ops as applyOps entries in 'txn' (not in multi mode): several
 * chained with prevOpTime when they pass 16 MB, every one but the last marked partialTxn,
 * the last one 'prepare: true' when preparing. *last_ts: the last entry's timestamp.
 */
static int
write_apply_ops(shl_storage_txn_t *txn, const db_txn_t *t, const bson_t *const *ops, size_t nops,
                bool prepare, uint64_t *first_ts, uint64_t *last_ts, shl_status_t *st)
{
    int64_t term = shl_storage_term(t->reg->eng);
    uint64_t prev = 0, ts = 0;
    size_t i = 0;
    int ret = 0;

    do {
        bson_t o = BSON_INITIALIZER, arr, extra;
        size_t bytes = 0;
        uint32_t k = 0;
        shl_write_opts_t wo = {0};
        char key[16];
        const char *kp;

        BSON_APPEND_ARRAY_BEGIN(&o, "applyOps", &arr);
        while (i < nops && (k == 0 || bytes + ops[i]->len < DB_TXN_MAX_ENTRY_BYTES - 64 * 1024)) {
            bson_uint32_to_string(k++, &kp, key, sizeof(key));
            bson_append_document(&arr, kp, -1, ops[i]);
            bytes += ops[i]->len;
            i++;
        }
        bson_append_array_end(&o, &arr);
        if (i < nops) {
            BSON_APPEND_BOOL(&o, "partialTxn", true);
        } else if (prepare) {
            BSON_APPEND_BOOL(&o, "prepare", true);
        }
        if (i == nops && t->nans > 0) {
            /* What a retry of the parent's statements is told, kept with the transaction's
             * last entry so a restart can tell it too (db_session_recover_children). */
            BSON_APPEND_ARRAY_BEGIN(&o, DB_RETRY_ANSWERS_FIELD, &arr);
            for (size_t a = 0; a < t->nans; a++) {
                bson_t one;
                bson_uint32_to_string((uint32_t)a, &kp, key, sizeof(key));
                BSON_APPEND_DOCUMENT_BEGIN(&arr, kp, &one);
                BSON_APPEND_INT32(&one, "stmtId", t->ans_ids[a]);
                BSON_APPEND_DOCUMENT(&one, "answer", t->ans[a]);
                bson_append_document_end(&arr, &one);
            }
            bson_append_array_end(&o, &arr);
        }
        entry_fields(&extra, t, prev, term);
        wo.oplog_extra = &extra;
        ret = shl_oplog_append(txn, 'c', "admin.$cmd", NULL, &o, NULL, &wo, &ts, st);
        bson_destroy(&o);
        bson_destroy(&extra);
        SHL_ERR(ret);
        if (prev == 0 && first_ts != NULL) {
            *first_ts = ts;
        }
        prev = ts;
    } while (i < nops);
    *last_ts = ts;
done:
    return ret;
}

/* config.transactions {_id: lsid, txnNum, lastWriteOpTime, lastWriteDate, state} in 'txn' at
 * its last write's timestamp. */
static int
write_txn_record(shl_storage_txn_t *txn, const db_txn_t *t, uint64_t ts, const char *state,
                 shl_status_t *st)
{
    shl_storage_engine_t *eng = t->reg->eng;
    shl_collection_t *tc = shl_catalog_get(eng, DB_TRANSACTIONS_NS);
    bson_t rec = BSON_INITIALIZER;
    int ret = 0;

    if (tc == NULL) {
        goto done;
    }
    shl_lsid_append(&rec, "_id", &t->lsid);
    BSON_APPEND_INT64(&rec, "txnNum", t->txn_number);
    append_optime(&rec, "lastWriteOpTime", ts, shl_storage_term(eng));
    BSON_APPEND_DATE_TIME(&rec, "lastWriteDate", shl_clock_wall_ms());
    BSON_APPEND_UTF8(&rec, "state", state);
    if (t->prepare_ts != 0 && strcmp(state, "prepared") == 0) {
        append_optime(&rec, "startOpTime", ts, shl_storage_term(eng));
    }
    SHL_ERR(shl_doc_upsert_derived(txn, tc, &rec, NULL, st));
done:
    shl_collection_release(tc);
    bson_destroy(&rec);
    return ret;
}

/* ---------------------------------------------------------------- commit / abort */

static int
commit_unprepared(shl_op_ctx_t *op, db_txn_t *t, shl_status_t *st)
{
    size_t nops = 0;
    const bson_t *const *ops = shl_storage_txn_ops(t->stxn, &nops, NULL);
    uint64_t ts = 0;
    shl_storage_txn_t *stxn = t->stxn;
    int ret = 0;

    kill_cursors(op, t);
    shl_storage_txn_set_multi(stxn, false);
    if (nops > 0) {
        ret = write_apply_ops(stxn, t, ops, nops, false, NULL, &ts, st);
        if (ret == 0) {
            /* Change streams' pre-images of its ops, keyed by the commit's timestamp. */
            ret = shl_txn_write_pre_images(stxn, stxn, ts, st);
        }
        if (ret == 0) {
            ret = write_txn_record(stxn, t, ts, "committed", st);
        }
    }
    t->stxn = NULL;
    if (ret != 0) {
        shl_storage_txn_abort(stxn);
    } else {
        ret = shl_storage_txn_commit(stxn, st);
    }
    if (ret != 0) {
        txn_release(t);
        txn_set_state(t, TXN_ABORTED);
        atomic_fetch_add(&t->reg->aborted, 1);
        goto done;
    }
    db_op_note_write_ts(ts);
    report_observed(op, t);
    publish_answers(t, ts);
    end_created(t, ts);
    list_remove(t->reg, t);
    txn_set_state(t, TXN_COMMITTED);
    atomic_fetch_add(&t->reg->committed, 1);
done:
    return ret;
}

/* A unit that writes one decision entry of a prepared transaction at a fixed timestamp. */
typedef struct decision_unit {
    db_txn_t *t;
    const char *cmd;
    uint64_t commit_ts;
} decision_unit_t;

static int
decision_unit_fn(shl_storage_txn_t *txn, void *arg, shl_status_t *st)
{
    decision_unit_t *u = arg;
    bson_t o = BSON_INITIALIZER, extra;
    shl_write_opts_t wo = {0};
    uint64_t ts = 0;
    int ret = 0;

    BSON_APPEND_INT32(&o, u->cmd, 1);
    if (u->commit_ts != 0) {
        shl_bson_append_timestamp_u64(&o, "commitTimestamp", u->commit_ts);
    }
    entry_fields(&extra, u->t, u->t->prepare_ts, shl_storage_term(u->t->reg->eng));
    wo.oplog_extra = &extra;
    ret = shl_oplog_append(txn, 'c', "admin.$cmd", NULL, &o, NULL, &wo, &ts, st);
    if (ret == 0 && u->commit_ts != 0) {
        /* Change streams' pre-images of its ops, keyed by the commit entry's timestamp. */
        ret = shl_txn_write_pre_images(txn, u->t->stxn, ts, st);
    }
    if (ret == 0) {
        ret = write_txn_record(
            txn, u->t, ts, strcmp(u->cmd, "commitTransaction") == 0 ? "committed" : "aborted", st);
    }
    bson_destroy(&o);
    bson_destroy(&extra);
    return ret;
}

/*
 * Decide a prepared transaction: its decision entry at a timestamp the storage transaction
 * reserved (so the no-holes point stays below it until the data committed), then the WT
 * commit at commit_ts with that durable timestamp, or the rollback.
 */
static int
decide_prepared(const shl_op_ctx_t *op, db_txn_t *t, bool commit, uint64_t commit_ts,
                uint64_t *entry_ts, shl_status_t *st)
{
    decision_unit_t u = {t, commit ? "commitTransaction" : "abortTransaction", commit_ts};
    uint64_t ts = 0;
    int ret = 0;

    if (commit) {
        /* The decision entry's time is the commit's durable timestamp, which WiredTiger wants
         * at or above the commit timestamp: the coordinator chose the largest prepare time
         * of all participants, which this node's clock may not have reached (MongoDB's
         * coordinator advances the cluster time to it; gossip may lag). */
        shl_storage_clock_advance(t->reg->eng, commit_ts);
    }
    SHL_ERR(shl_storage_txn_reserve(t->stxn, &ts, st));
    SHL_ERR(shl_storage_write_replayed(t->reg->eng, ts, decision_unit_fn, &u, st));
    *entry_ts = ts;
    if (commit) {
        shl_storage_txn_t *stxn = t->stxn;
        t->stxn = NULL;
        ret = shl_storage_txn_commit_at(stxn, commit_ts, ts, st);
        if (ret != 0) {
            SHL_LOG_ERROR(TXN, 5100306, "committing a prepared transaction failed", "code",
                          BCON_INT32(ret), "errmsg", BCON_UTF8(st->reason));
            SHL_INVARIANT(ret == 0);
        }
        report_observed(op, t);
        publish_answers(t, ts);
        end_created(t, commit_ts);
    }
    txn_release(t);
done:
    return ret;
}

/*
 * A decision has been applied: the statement ends and the session is checked in before the
 * write concern wait, so the session's next transaction (a client's next one, which may
 * reach this participant right after the coordinator answered) does not wait for this
 * decision's journal flush, as a MongoDB participant checks its session in before waiting
 * for the write concern. Only the decision's own reply waits.
 */
static void
end_statement_early(shl_op_ctx_t *op)
{
    db_node_t *node = node_of(op);

    if (op->txn_session != NULL) {
        (void)db_txn_statement_end(node->txns, op, 0, NULL, NULL);
        db_session_checkin_txn(node->sessions, op->txn_session);
        op->txn_session = NULL;
    }
}

static int
cmd_commit_transaction(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    db_txn_t *t = op->txn;
    shl_write_concern_t wc;
    bson_iter_t it;
    uint64_t commit_ts = 0, entry_ts = 0;
    int ret = 0;

    (void)reply;
    if (t == NULL) {
        SHL_FAIL(st, SHL_CODE_INVALID_OPTIONS,
                 "commitTransaction must be run within a transaction");
    }
    SHL_ERR(db_write_concern_get(op, &wc, st));
    if (bson_iter_init_find(&it, cmd, "commitTimestamp")) {
        if (!BSON_ITER_HOLDS_TIMESTAMP(&it)) {
            SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH, "commitTimestamp must be a Timestamp");
        }
        commit_ts = shl_bson_iter_timestamp_u64(&it);
        if (commit_ts == 0) {
            SHL_FAIL(st, SHL_CODE_INVALID_OPTIONS, "'commitTimestamp' cannot be null");
        }
    }
    switch (t->state) {
    case TXN_COMMITTED:
        break; /* a retry: the decision stands */
    case TXN_IN_PROGRESS:
        if (commit_ts != 0) {
            SHL_FAIL(st, SHL_CODE_INVALID_OPTIONS,
                     "commitTransaction for an unprepared transaction cannot have a "
                     "commitTimestamp");
        }
        SHL_ERR(commit_unprepared(op, t, st));
        break;
    case TXN_PREPARED:
        if (commit_ts == 0) {
            SHL_FAIL(st, SHL_CODE_INVALID_OPTIONS,
                     "'commitTimestamp' must be provided to commit a prepared transaction");
        }
        if (commit_ts < t->prepare_ts) {
            SHL_FAIL(st, SHL_CODE_INVALID_OPTIONS,
                     "commitTimestamp cannot be less than the prepareTimestamp");
        }
        SHL_ERR(decide_prepared(op, t, true, commit_ts, &entry_ts, st));
        db_op_note_write_ts(entry_ts);
        txn_set_state(t, TXN_COMMITTED);
        atomic_fetch_add(&t->reg->committed, 1);
        atomic_fetch_add(&t->reg->prepared_committed, 1);
        break;
    case TXN_ABORTED:
        no_such_txn(st, t->txn_number, t);
        SHL_ERR(st->code);
        break;
    }
    end_statement_early(op);
    db_write_concern_wait(op, &wc, reply);
done:
    return ret;
}

static int
cmd_abort_transaction(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    db_txn_t *t = op->txn;
    shl_write_concern_t wc;
    uint64_t entry_ts = 0;
    int ret = 0;

    (void)cmd;
    if (t == NULL) {
        SHL_FAIL(st, SHL_CODE_INVALID_OPTIONS, "abortTransaction must be run within a transaction");
    }
    SHL_ERR(db_write_concern_get(op, &wc, st));
    switch (t->state) {
    case TXN_IN_PROGRESS:
        abort_unprepared(op, t);
        break;
    case TXN_PREPARED:
        SHL_ERR(decide_prepared(op, t, false, 0, &entry_ts, st));
        db_op_note_write_ts(entry_ts);
        txn_set_state(t, TXN_ABORTED);
        atomic_fetch_add(&t->reg->aborted, 1);
        atomic_fetch_add(&t->reg->prepared_aborted, 1);
        break;
    case TXN_COMMITTED:
        SHL_FAIL(st, SHL_CODE_TRANSACTION_COMMITTED,
                 "Transaction with { txnNumber: %lld } has been committed.",
                 (long long)t->txn_number);
        break;
    case TXN_ABORTED:
        no_such_txn(st, t->txn_number, t);
        SHL_ERR(st->code);
        break;
    }
    end_statement_early(op);
    db_write_concern_wait(op, &wc, reply);
done:
    return ret;
}

/* ---------------------------------------------------------------- prepare */

typedef struct prepare_unit {
    db_txn_t *t;
    const bson_t *const *ops;
    size_t nops;
    uint64_t ts;
    uint64_t first;
} prepare_unit_t;

static int
prepare_unit_fn(shl_storage_txn_t *txn, void *arg, shl_status_t *st)
{
    prepare_unit_t *u = arg;
    int ret = 0;

    SHL_ERR(write_apply_ops(txn, u->t, u->ops, u->nops, true, &u->first, &u->ts, st));
    u->t->prepare_ts = u->ts;
    SHL_ERR(write_txn_record(txn, u->t, u->ts, "prepared", st));
done:
    return ret;
}

int db_txn_prepare_storage(db_txn_t *t, uint64_t *prepare_ts, shl_status_t *st);

int
db_txn_prepare_storage(db_txn_t *t, uint64_t *prepare_ts, shl_status_t *st)
{
    prepare_unit_t u = {t, NULL, 0, 0, 0};
    int ret = 0;

    u.ops = shl_storage_txn_ops(t->stxn, &u.nops, NULL);
    /* A timestamp below every entry of the prepare, held in flight by the transaction until
     * WiredTiger prepared it: no snapshot can start at or after the prepare timestamp before
     * (WiredTiger refuses to prepare below an active read timestamp), and the stable
     * timestamp stays below it while the transaction is prepared (recovery replays all its
     * entries; truncation keeps them). */
    SHL_ERR(shl_storage_txn_reserve(t->stxn, &t->pin_ts, st));
    shl_storage_pin_stable(t->reg->eng, t->pin_ts);
    ret = shl_storage_write_retry(t->reg->eng, prepare_unit_fn, &u, NULL, st);
    if (ret != 0) {
        t->prepare_ts = 0; /* no prepare entry committed */
    } else {
        ret = shl_storage_txn_prepare(t->stxn, u.ts, st);
    }
    shl_storage_txn_release_reserved(t->stxn);
    SHL_ERR(ret);
    *prepare_ts = u.ts;
done:
    return ret;
}

static int
cmd_prepare_transaction(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    db_txn_t *t = op->txn;
    shl_write_concern_t wc;
    uint64_t ts = 0;
    int ret = 0;

    (void)cmd;
    if (t == NULL) {
        SHL_FAIL(st, SHL_CODE_INVALID_OPTIONS,
                 "prepareTransaction must be run within a transaction");
    }
    SHL_ERR(db_write_concern_get(op, &wc, st));
    if (t->state == TXN_PREPARED) {
        /* A retried prepare answers the same timestamp. */
        ts = t->prepare_ts;
    } else if (t->state == TXN_COMMITTED) {
        SHL_FAIL(st, SHL_CODE_TRANSACTION_COMMITTED,
                 "Transaction with { txnNumber: %lld } has been committed.",
                 (long long)t->txn_number);
    } else if (t->ncreated > 0) {
        /* MongoDB 7.0: a collection created in the transaction is no prepared state (its
         * create is committed DDL here): the transaction aborts and its coordinator with it. */
        abort_unprepared(op, t);
        SHL_FAIL(st, SHL_CODE_OPERATION_NOT_SUPPORTED_IN_TRANSACTION,
                 "Cannot create new collections inside distributed transactions");
    } else {
        kill_cursors(op, t);
        ret = db_txn_prepare_storage(t, &ts, st);
        if (ret != 0 && t->prepare_ts != 0) {
            /* The prepare entry is in the oplog: its abort entry must follow, or a restart
             * would prepare it again. */
            shl_status_t why = *st;
            uint64_t ets = 0;
            shl_status_clear(st);
            if (decide_prepared(op, t, false, 0, &ets, st) != 0) {
                SHL_LOG_ERROR(TXN, 5100305, "writing the abort of a failed prepare failed", "error",
                              BCON_UTF8(st->reason));
                txn_release(t);
            }
            txn_set_state(t, TXN_ABORTED);
            atomic_fetch_add(&t->reg->aborted, 1);
            *st = why;
            ret = why.code;
            goto done;
        }
        if (ret != 0) {
            abort_unprepared(op, t);
            SHL_ERR(ret);
        }
        txn_set_state(t, TXN_PREPARED);
        t->was_prepared = true;
        atomic_fetch_add(&t->reg->prepared, 1);
    }
    db_op_note_write_ts(ts);
    shl_bson_append_timestamp_u64(reply, "prepareTimestamp", ts);
    db_write_concern_wait(op, &wc, reply);
done:
    return ret;
}

static const shl_command_t txn_commands[] = {
    {"commitTransaction",
     {NULL},
     cmd_commit_transaction,
     SHL_CMD_ADMIN_ONLY | SHL_CMD_NEEDS_PRIMARY | SHL_CMD_IN_TXN,
     "commit a multi-document transaction"},
    {"abortTransaction",
     {NULL},
     cmd_abort_transaction,
     SHL_CMD_ADMIN_ONLY | SHL_CMD_NEEDS_PRIMARY | SHL_CMD_IN_TXN,
     "abort a multi-document transaction"},
    {"prepareTransaction",
     {NULL},
     cmd_prepare_transaction,
     SHL_CMD_ADMIN_ONLY | SHL_CMD_NEEDS_PRIMARY | SHL_CMD_IN_TXN,
     "prepare a multi-document transaction (two-phase commit)"},
};

void
db_register_txn_commands(shl_command_registry_t *reg)
{
    for (size_t i = 0; i < sizeof(txn_commands) / sizeof(txn_commands[0]); i++) {
        shl_command_registry_add(reg, &txn_commands[i]);
    }
}

/* ---------------------------------------------------------------- statistics */

void
db_txn_append_stats(db_txn_registry_t *reg, bson_t *t)
{
    int64_t active = 0, inactive = 0, prepared = 0;

    if (reg != NULL) {
        pthread_mutex_lock(&reg->mu);
        for (db_txn_t *x = reg->head; x != NULL; x = x->next) {
            if (x->active) {
                active++;
            } else {
                inactive++;
            }
            if (x->state == TXN_PREPARED) {
                prepared++;
            }
        }
        pthread_mutex_unlock(&reg->mu);
    }
#define LOAD(f) (reg != NULL ? (int64_t)atomic_load(&reg->f) : 0)
    BSON_APPEND_INT64(t, "currentActive", active);
    BSON_APPEND_INT64(t, "currentInactive", inactive);
    BSON_APPEND_INT64(t, "currentOpen", active + inactive);
    BSON_APPEND_INT64(t, "totalAborted", LOAD(aborted));
    BSON_APPEND_INT64(t, "totalCommitted", LOAD(committed));
    BSON_APPEND_INT64(t, "totalStarted", LOAD(started));
    BSON_APPEND_INT64(t, "totalPrepared", LOAD(prepared));
    BSON_APPEND_INT64(t, "totalPreparedThenCommitted", LOAD(prepared_committed));
    BSON_APPEND_INT64(t, "totalPreparedThenAborted", LOAD(prepared_aborted));
    BSON_APPEND_INT64(t, "currentPrepared", prepared);
#undef LOAD
}

/* ---------------------------------------------------------------- recovery */

/* The session of a transaction's entry: lsid and txnNumber; false for other entries. */
static bool
entry_session(const bson_t *entry, shl_lsid_t *lsid, int64_t *txn_number)
{
    bson_t doc;
    shl_status_t ignored = SHL_STATUS_INIT;

    if (!shl_bson_get_subdoc(entry, "lsid", &doc) || !bson_has_field(entry, "txnNumber") ||
        shl_lsid_parse(&doc, lsid, &ignored) != 0) {
        return false;
    }
    *txn_number = shl_bson_int64_at(entry, "txnNumber");
    return true;
}

static recovered_prepare_t *
take_recovered(db_txn_registry_t *reg, const shl_lsid_t *lsid, int64_t txn_number)
{
    for (recovered_prepare_t **pp = &reg->recovered; *pp != NULL; pp = &(*pp)->next) {
        recovered_prepare_t *r = *pp;
        if (r->txn_number == txn_number && shl_lsid_equal(&r->lsid, lsid)) {
            *pp = r->next;
            return r;
        }
    }
    return NULL;
}

typedef struct replay_commit {
    const bson_t *ops;
} replay_commit_t;

/* The session record a replayed transaction entry implies, with its state. */
typedef struct replay_record {
    const bson_t *entry;
    const shl_lsid_t *lsid;
    int64_t txn_number;
    uint64_t ts;
    const char *state;
} replay_record_t;

/* The lastWriteOpTime.ts of a config.transactions record (0: none). */
static uint64_t
record_ts(const bson_t *rec)
{
    bson_iter_t it;

    if (bson_iter_init(&it, rec) && bson_iter_find_descendant(&it, "lastWriteOpTime.ts", &it) &&
        BSON_ITER_HOLDS_TIMESTAMP(&it)) {
        return shl_bson_iter_timestamp_u64(&it);
    }
    return 0;
}

static int
replay_record_fn(shl_storage_txn_t *txn, void *arg, shl_status_t *st)
{
    replay_record_t *u = arg;
    shl_storage_engine_t *eng = shl_storage_txn_engine(txn);
    shl_collection_t *tc = shl_catalog_get(eng, DB_TRANSACTIONS_NS);
    bson_t rec = BSON_INITIALIZER, cur = BSON_INITIALIZER;
    bson_iter_t it;
    int64_t rid = 0, wall = 0;
    bool found = false;
    int ret = 0;

    if (tc == NULL) {
        goto done;
    }
    shl_lsid_append(&rec, "_id", u->lsid);
    bson_iter_init_find(&it, &rec, "_id");
    bson_destroy(&cur);
    SHL_ERR(shl_doc_find_by_id(txn, tc, bson_iter_value(&it), &cur, &rid, &found, st));
    if (found &&
        (shl_bson_int64_at(&cur, "txnNum") > u->txn_number ||
         (shl_bson_int64_at(&cur, "txnNum") == u->txn_number && record_ts(&cur) > u->ts))) {
        goto done; /* a newer write of the session is recorded already */
    }
    if (bson_iter_init_find(&it, u->entry, "wall") && BSON_ITER_HOLDS_DATE_TIME(&it)) {
        wall = bson_iter_date_time(&it);
    }
    BSON_APPEND_INT64(&rec, "txnNum", u->txn_number);
    append_optime(&rec, "lastWriteOpTime", u->ts, shl_bson_int64_at(u->entry, "t"));
    BSON_APPEND_DATE_TIME(&rec, "lastWriteDate", wall);
    BSON_APPEND_UTF8(&rec, "state", u->state);
    SHL_ERR(shl_doc_upsert_derived(txn, tc, &rec, NULL, st));
done:
    shl_collection_release(tc);
    bson_destroy(&cur);
    bson_destroy(&rec);
    return ret;
}

/* Write the state a replayed transaction entry gives its session's record (the record is a
 * non-logged table's: only the oplog survives a crash past the last checkpoint), so that a
 * retried commitTransaction after the restart answers from it. */
static int
replay_record(shl_storage_engine_t *eng, const bson_t *entry, const shl_lsid_t *lsid, int64_t n,
              uint64_t ts, const char *state, shl_status_t *st)
{
    replay_record_t u = {entry, lsid, n, ts, state};

    return ts == 0 ? 0 : shl_storage_write_replayed(eng, ts, replay_record_fn, &u, st);
}

static int
replay_commit_fn(shl_storage_txn_t *txn, void *arg, shl_status_t *st)
{
    replay_commit_t *u = arg;

    return shl_oplog_apply_inner_ops(txn, u->ops, st);
}

static int install_prepared(db_txn_registry_t *reg, db_session_catalog_t *cat,
                            recovered_prepare_t *r, bool live, bool *kept, shl_status_t *st);
static void applier_op(const db_txn_registry_t *reg, shl_op_ctx_t *op);

/*
 * A secondary's applier met a prepare entry: the transaction is prepared in storage now, as
 * on the primary (readers of its documents meet prepare conflicts until the decision entry),
 * and owned by its session, so that on step-up this member answers the coordinator. Should
 * storage refuse the prepare, its ops wait in the list for the decision entry as in recovery.
 */
static int
apply_prepare(db_txn_registry_t *reg, recovered_prepare_t *r, shl_status_t *st)
{
    bool kept = false;
    int ret = install_prepared(reg, reg->live, r, true, &kept, st);

    if (ret != 0 && kept) {
        SHL_LOG_WARNING(TXN, 5100309, "could not hold an applied prepared transaction",
                     "txnNumber", BCON_INT64(r->txn_number), "error", BCON_UTF8(st->reason));
        shl_status_clear(st);
        ret = 0;
        r->next = reg->recovered;
        reg->recovered = r;
    }
    return ret;
}

/*
 * A secondary's applier met a decision entry (its 'o') at 'ts' of
 * transaction 'n' of 'lsid': if the session holds that transaction prepared, commit it at
 * the entry's commitTimestamp with 'ts' as its durable timestamp, or roll it back. Returns
 * whether it did (false: the caller replays the decision as recovery does).
 */
static bool
decide_applied(db_txn_registry_t *reg, const bson_t *o,
               const shl_lsid_t *lsid, int64_t n, uint64_t ts, bool commit)
{
    shl_status_t st = SHL_STATUS_INIT;
    shl_op_ctx_t op;
    db_session_t *s = NULL;
    db_txn_t *t;
    bson_iter_t it;
    uint64_t commit_ts = ts;
    bool done = false;

    if (reg->live == NULL) {
        return false;
    }
    if (bson_iter_init_find(&it, o, "commitTimestamp") && BSON_ITER_HOLDS_TIMESTAMP(&it)) {
        commit_ts = shl_bson_iter_timestamp_u64(&it);
    }
    applier_op(reg, &op);
    if (db_session_checkout_lsid(reg->live, &op, lsid, &s, &st) != 0) {
        return false;
    }
    t = *db_session_txn_slot(s);
    if (t != NULL && t->txn_number == n && t->state == TXN_PREPARED && t->stxn != NULL) {
        if (commit) {
            shl_storage_txn_t *stxn = t->stxn;
            t->stxn = NULL;
            if (shl_storage_txn_commit_at(stxn, commit_ts, ts, &st) != 0) {
                SHL_LOG_ERROR(TXN, 5100310, "committing an applied prepared transaction failed",
                              "errmsg", BCON_UTF8(st.reason));
                SHL_INVARIANT(false);
            }
            end_created(t, commit_ts);
            txn_set_state(t, TXN_COMMITTED);
            atomic_fetch_add(&reg->committed, 1);
            atomic_fetch_add(&reg->prepared_committed, 1);
        } else {
            txn_set_state(t, TXN_ABORTED);
            atomic_fetch_add(&reg->aborted, 1);
            atomic_fetch_add(&reg->prepared_aborted, 1);
        }
        txn_release(t);
        done = true;
    }
    db_session_checkin_txn(reg->live, s);
    return done;
}

int
db_txn_replay_entry(shl_storage_engine_t *eng, const bson_t *entry, void *arg, shl_status_t *st)
{
    db_txn_registry_t *reg = arg;
    bson_t o;
    bson_iter_t it;
    shl_lsid_t lsid;
    int64_t n = 0;
    uint64_t ts = 0;
    recovered_prepare_t *r = NULL;
    int ret = 0;

    if (reg == NULL || !shl_bson_get_subdoc(entry, "o", &o) || !bson_iter_init(&it, &o) ||
        !bson_iter_next(&it) || !entry_session(entry, &lsid, &n)) {
        goto done;
    }
    if (bson_iter_init_find(&it, entry, "ts") && BSON_ITER_HOLDS_TIMESTAMP(&it)) {
        ts = shl_bson_iter_timestamp_u64(&it);
    }
    bson_iter_init(&it, &o);
    bson_iter_next(&it);
    if (strcmp(bson_iter_key(&it), "applyOps") == 0 && !bson_has_field(&o, "prepare") &&
        !bson_has_field(&o, "partialTxn")) {
        /* An unprepared transaction's last entry: recovery applied it; it committed. */
        SHL_ERR(replay_record(eng, entry, &lsid, n, ts, "committed", st));
    } else if (strcmp(bson_iter_key(&it), "applyOps") == 0 && bson_has_field(&o, "prepare")) {
        SHL_ERR(replay_record(eng, entry, &lsid, n, ts, "prepared", st));
        r = bson_aligned_alloc0(BSON_ALIGNOF(recovered_prepare_t), sizeof(*r));
        r->lsid = lsid;
        r->txn_number = n;
        r->prepare_ts = ts;
        /* Recovery's own checkpoint must not pass it either: every entry of the transaction
         * is above the stable timestamp recovery started from. */
        r->pin_ts = shl_storage_stable_ts(eng) + 1;
        shl_storage_pin_stable(eng, r->pin_ts);
        SHL_ERR(shl_oplog_txn_ops(eng, entry, &r->ops, st));
        if (reg->live != NULL) {
            SHL_ERR(apply_prepare(reg, r, st));
        } else {
            r->next = reg->recovered;
            reg->recovered = r;
        }
        r = NULL;
    } else if (strcmp(bson_iter_key(&it), "commitTransaction") == 0 &&
               decide_applied(reg, &o, &lsid, n, ts, true)) {
        SHL_ERR(replay_record(eng, entry, &lsid, n, ts, "committed", st));
    } else if (strcmp(bson_iter_key(&it), "commitTransaction") == 0) {
        /* Its data commits at the decision entry's own timestamp (above the stable one). */
        replay_commit_t u = {NULL};
        bson_t ops = BSON_INITIALIZER;
        r = take_recovered(reg, &lsid, n);
        if (r != NULL) {
            u.ops = &r->ops;
        } else {
            /* The prepare entry is older than the stable timestamp: read it. */
            bson_t prep, po;
            bool found = false;
            bson_iter_t f;
            uint64_t pts = 0;
            if (shl_bson_get_subdoc(entry, "prevOpTime", &po) &&
                bson_iter_init_find(&f, &po, "ts") && BSON_ITER_HOLDS_TIMESTAMP(&f)) {
                pts = shl_bson_iter_timestamp_u64(&f);
            }
            ret = shl_oplog_read(eng, pts, &prep, &found, st);
            if (ret == 0 && found) {
                bson_destroy(&ops);
                ret = shl_oplog_txn_ops(eng, &prep, &ops, st);
            }
            bson_destroy(&prep);
            SHL_ERR(ret);
            u.ops = &ops;
        }
        ret = shl_storage_write_replayed(eng, ts, replay_commit_fn, &u, st);
        bson_destroy(&ops);
        SHL_ERR(ret);
        SHL_ERR(replay_record(eng, entry, &lsid, n, ts, "committed", st));
    } else if (strcmp(bson_iter_key(&it), "abortTransaction") == 0) {
        if (!decide_applied(reg, &o, &lsid, n, ts, false)) {
            r = take_recovered(reg, &lsid, n);
        }
        SHL_ERR(replay_record(eng, entry, &lsid, n, ts, "aborted", st));
    }
done:
    if (r != NULL) {
        if (r->pin_ts != 0) {
            shl_storage_unpin_stable(eng, r->pin_ts);
        }
        bson_destroy(&r->ops);
        bson_free(r);
    }
    return ret;
}

/* An operation context for the applier's session checkouts (bounded: a session is only
 * busy a moment on a secondary). */
static void
applier_op(const db_txn_registry_t *reg, shl_op_ctx_t *op)
{
    memset(op, 0, sizeof(*op));
    op->svc = reg->node != NULL ? reg->node->svc : NULL;
    op->deadline_us = shl_clock_mono_us() + 30 * 1000 * 1000;
}

/*
 * Prepare the transaction of 'r' again in a new storage transaction (its ops replayed in
 * multi mode, prepared at its prepare timestamp; the stable pin passes to it) and hand it to
 * its session: checked out when 'live' (a secondary's applier), attached at startup. A
 * transaction the session held before (an older one, decided or not prepared) is dropped.
 * 'r' is consumed unless *kept: the storage prepare failed on a live node and 'r' stays
 * the caller's, its pin held.
 */
static int
install_prepared(db_txn_registry_t *reg, db_session_catalog_t *cat, recovered_prepare_t *r,
                 bool live, bool *kept, shl_status_t *st)
{
    db_txn_t *t = bson_malloc0(sizeof(*t));
    db_session_t *s = NULL;
    int ret = 0;

    *kept = false;
    t->reg = reg;
    t->lsid = r->lsid;
    t->txn_number = r->txn_number;
    txn_set_state(t, TXN_PREPARED);
    t->was_prepared = true;
    t->start_wall_ms = shl_clock_wall_ms();
    t->start_mono_us = shl_clock_mono_us();
    t->last_active_mono_us = t->start_mono_us;
    shl_str_copy(t->level, sizeof(t->level), "local");
    ret = shl_storage_txn_begin(reg->eng, NULL, &t->stxn, st);
    if (ret == 0) {
        shl_storage_txn_set_multi(t->stxn, true);
        ret = shl_oplog_apply_inner_ops(t->stxn, &r->ops, st);
    }
    if (ret == 0) {
        /* Every namespace it wrote: a migration waits for its decision (the writes it
         * observed before the crash are forgotten, so its commit reports none). */
        bson_iter_t it, f;
        if (bson_iter_init(&it, &r->ops)) {
            while (bson_iter_next(&it)) {
                if (BSON_ITER_HOLDS_DOCUMENT(&it) && bson_iter_recurse(&it, &f) &&
                    bson_iter_find(&f, "ns") && BSON_ITER_HOLDS_UTF8(&f)) {
                    add_ns(t, bson_iter_utf8(&f, NULL), true);
                }
            }
        }
    }
    if (ret == 0) {
        /* The pin recovery took passes to the transaction. */
        t->pin_ts = r->pin_ts;
        r->pin_ts = 0;
        t->prepare_ts = r->prepare_ts;
        ret = shl_storage_txn_prepare(t->stxn, r->prepare_ts, st);
    }
    if (ret != 0 && live) {
        /* Keep 'r' (and its pin) for the decision entry's replay of its ops. */
        if (t->pin_ts != 0) {
            r->pin_ts = t->pin_ts;
            t->pin_ts = 0;
        }
        t->prepare_ts = 0;
        txn_release(t);
        bson_free(t);
        *kept = true;
        goto done;
    }
    if (r->pin_ts != 0) {
        shl_storage_unpin_stable(reg->eng, r->pin_ts);
    }
    bson_destroy(&r->ops);
    bson_free(r);
    if (ret != 0) {
        txn_release(t);
        bson_free(t);
        goto done;
    }
    if (live) {
        shl_op_ctx_t op;
        applier_op(reg, &op);
        ret = db_session_checkout_lsid(cat, &op, &t->lsid, &s, st);
        if (ret != 0) {
            /* Unreachable in practice (nothing holds a secondary's session long): the
             * decision entry will find nothing and replay the prepare entry's ops. */
            txn_release(t);
            bson_free(t);
            goto done;
        }
        if (*db_session_txn_slot(s) != NULL) {
            /* A former primary's open transaction ends with its cursors. */
            abort_unprepared(&op, *db_session_txn_slot(s));
            db_txn_discard(reg, *db_session_txn_slot(s));
        }
        db_session_set_txn_number(s, t->txn_number);
    } else {
        s = db_session_catalog_attach(cat, &t->lsid);
    }
    t->session = s;
    *db_session_txn_slot(s) = t;
    list_add(reg, t);
    atomic_fetch_add(&reg->started, 1);
    atomic_fetch_add(&reg->prepared, 1);
    if (live) {
        db_session_checkin_txn(cat, s);
    }
    SHL_LOG_INFO(TXN, 5100302,
                 live ? "prepared transaction applied" : "prepared transaction recovered",
                 "txnNumber", BCON_INT64(t->txn_number), "prepareTimestamp",
                 BCON_TIMESTAMP(SHL_TS_SECS(t->prepare_ts), SHL_TS_INC(t->prepare_ts)));
done:
    return ret;
}

int
db_txn_recover_prepared(db_txn_registry_t *reg, db_session_catalog_t *cat, shl_status_t *st)
{
    int ret = 0;
    bool kept = false;

    while (ret == 0 && reg->recovered != NULL) {
        recovered_prepare_t *r = reg->recovered;
        reg->recovered = r->next;
        ret = install_prepared(reg, cat, r, false, &kept, st);
    }
    reg->live = cat;
    return ret;
}

/* ---------------------------------------------------------------- rollback */

/* Free 'r' (its pin released). */
static void
recovered_free(db_txn_registry_t *reg, recovered_prepare_t *r)
{
    if (r->pin_ts != 0) {
        shl_storage_unpin_stable(reg->eng, r->pin_ts);
    }
    bson_destroy(&r->ops);
    bson_free(r);
}

/*
 * Take prepared transaction 't' (its session checked out) out of storage for a rollback to
 * 'common': one whose prepare entry is after it is aborted for good (the entry leaves the
 * oplog, no decision will come here); one prepared at or before it goes to reg->held with its
 * ops (read back from its prepare entry) and its stable pin, to be prepared again when the
 * rollback is done, as MongoDB reconstructs the transactions still prepared at the common
 * point. Returns whether it was taken out.
 */
static bool
rollback_take(db_txn_registry_t *reg, db_txn_t *t, uint64_t common)
{
    shl_status_t st = SHL_STATUS_INIT;
    recovered_prepare_t *r = NULL;
    bson_t prep = BSON_INITIALIZER;
    bool found = false;

    if (t->prepare_ts <= common) {
        r = bson_aligned_alloc0(BSON_ALIGNOF(recovered_prepare_t), sizeof(*r));
        bson_init(&r->ops);
        bson_destroy(&prep);
        if (shl_oplog_read(reg->eng, t->prepare_ts, &prep, &found, &st) != 0 || !found) {
            /* Unreachable: the entry is at or before the common point, which stays. */
            SHL_LOG_WARNING(TXN, 5100313, "rollback could not read a prepare entry back",
                            "txnNumber", BCON_INT64(t->txn_number), "error",
                            BCON_UTF8(found ? st.reason : "no such entry"));
            bson_free(r);
            r = NULL;
        } else {
            bson_destroy(&r->ops);
            if (shl_oplog_txn_ops(reg->eng, &prep, &r->ops, &st) != 0) {
                recovered_free(reg, r); /* no pin yet */
                r = NULL;
            }
        }
    }
    if (r != NULL) {
        r->lsid = t->lsid;
        r->txn_number = t->txn_number;
        r->prepare_ts = t->prepare_ts;
        /* The pin passes to the held copy: the stable timestamp stays below the prepare
         * while nothing holds it in storage. */
        r->pin_ts = t->pin_ts;
        t->pin_ts = 0;
        r->next = reg->held;
        reg->held = r;
    }
    txn_set_state(t, TXN_ABORTED);
    txn_release(t);
    if (r != NULL) {
        SHL_LOG_INFO(TXN, 5100312, "rollback took out a prepared transaction to prepare it again",
                     "txnNumber", BCON_INT64(t->txn_number), "prepareTimestamp",
                     BCON_TIMESTAMP(SHL_TS_SECS(r->prepare_ts), SHL_TS_INC(r->prepare_ts)));
    } else {
        SHL_LOG_INFO(TXN, 5100311, "rollback aborted a prepared transaction", "txnNumber",
                     BCON_INT64(t->txn_number));
    }
    bson_destroy(&prep);
    return r == NULL;
}

int
db_txn_rollback_prepared_after(db_txn_registry_t *reg, uint64_t ts)
{
    lsid_list_t l = {0};
    int n = 0;

    if (reg == NULL || reg->live == NULL) {
        return 0;
    }
    /* Prepare entries the applier could not hold (waiting in the list for a decision). */
    for (recovered_prepare_t **pp = &reg->recovered; *pp != NULL;) {
        recovered_prepare_t *r = *pp;
        if (r->prepare_ts <= ts) {
            pp = &r->next;
            continue;
        }
        *pp = r->next;
        recovered_free(reg, r);
        n++;
    }
    pthread_mutex_lock(&reg->mu);
    for (db_txn_t *t = reg->head; t != NULL; t = t->next) {
        if (t->state != TXN_PREPARED) {
            continue;
        }
        if (l.n == l.cap) {
            l.cap = l.cap ? l.cap * 2 : 8;
            l.v = bson_realloc(l.v, l.cap * sizeof(*l.v));
            l.txn = bson_realloc(l.txn, l.cap * sizeof(*l.txn));
        }
        l.v[l.n] = t->lsid;
        l.txn[l.n] = t->txn_number;
        l.n++;
    }
    pthread_mutex_unlock(&reg->mu);
    for (size_t i = 0; i < l.n; i++) {
        shl_status_t st = SHL_STATUS_INIT;
        shl_op_ctx_t op;
        db_session_t *s = NULL;
        db_txn_t *t;

        applier_op(reg, &op);
        if (db_session_checkout_lsid(reg->live, &op, &l.v[i], &s, &st) != 0) {
            continue;
        }
        t = *db_session_txn_slot(s);
        if (t != NULL && t->txn_number == l.txn[i] && t->state == TXN_PREPARED &&
            rollback_take(reg, t, ts)) {
            n++;
        }
        db_session_checkin_txn(reg->live, s);
    }
    bson_free(l.v);
    bson_free(l.txn);
    return n;
}

int
db_txn_rollback_done(db_txn_registry_t *reg)
{
    int n = 0;

    while (reg != NULL && reg->held != NULL) {
        shl_status_t st = SHL_STATUS_INIT;
        recovered_prepare_t *r = reg->held;
        int64_t txn_number = r->txn_number;
        reg->held = r->next;
        r->next = NULL;
        if (apply_prepare(reg, r, &st) != 0) {
            /* Its session could not be checked out: the decision entry replays its ops. */
            SHL_LOG_WARNING(TXN, 5100314, "could not prepare a transaction again after rollback",
                            "txnNumber", BCON_INT64(txn_number), "error", BCON_UTF8(st.reason));
            continue;
        }
        n++;
    }
    return n;
}

/* ---------------------------------------------------------------- aborting from outside */

static void
collect(db_txn_registry_t *reg, bool (*pick)(void *arg, const db_txn_t *t), void *arg,
        lsid_list_t *out)
{
    pthread_mutex_lock(&reg->mu);
    for (db_txn_t *t = reg->head; t != NULL; t = t->next) {
        if (t->state != TXN_IN_PROGRESS || !pick(arg, t)) {
            continue;
        }
        if (out->n == out->cap) {
            out->cap = out->cap ? out->cap * 2 : 8;
            out->v = bson_realloc(out->v, out->cap * sizeof(*out->v));
            out->txn = bson_realloc(out->txn, out->cap * sizeof(*out->txn));
        }
        out->v[out->n] = t->lsid;
        out->txn[out->n] = t->txn_number;
        out->n++;
    }
    pthread_mutex_unlock(&reg->mu);
}

/*
 * Abort the listed transactions that are still open and unprepared, each with its session
 * checked out for a moment; a session busy with a statement is skipped (the statement's
 * kill or its own end deals with it). Returns how many were aborted.
 */
static int
abort_listed(db_txn_registry_t *reg, db_session_catalog_t *cat, shl_service_ctx_t *svc,
             const lsid_list_t *l, const char *why)
{
    int n = 0;

    for (size_t i = 0; i < l->n; i++) {
        shl_op_ctx_t op;
        shl_status_t st = SHL_STATUS_INIT;
        db_session_t *s = NULL;
        db_txn_t *t;

        memset(&op, 0, sizeof(op));
        op.svc = svc;
        op.deadline_us = shl_clock_mono_us() + 1000;
        if (db_session_checkout_lsid(cat, &op, &l->v[i], &s, &st) != 0) {
            continue;
        }
        t = *db_session_txn_slot(s);
        if (t != NULL && t->txn_number == l->txn[i] && t->state == TXN_IN_PROGRESS) {
            abort_unprepared(&op, t);
            n++;
            SHL_LOG_INFO(TXN, 5100303, "aborted a transaction", "reason", BCON_UTF8(why),
                         "txnNumber", BCON_INT64(l->txn[i]));
        }
        db_session_checkin_txn(cat, s);
    }
    (void)reg;
    return n;
}

typedef struct expiry_arg {
    int64_t now_us, limit_us;
} expiry_arg_t;

static bool
expired(void *arg, const db_txn_t *t)
{
    const expiry_arg_t *a = arg;
    return a->now_us - t->start_mono_us > a->limit_us;
}

int
db_txn_abort_expired(db_txn_registry_t *reg, db_session_catalog_t *cat, shl_service_ctx_t *svc)
{
    expiry_arg_t a = {shl_clock_mono_us(),
                      (int64_t)shl_opt_int(SHL_OPT_transactionLifetimeLimitSeconds) * 1000000};
    lsid_list_t l = {0};
    int n = 0;

    if (reg == NULL || cat == NULL) {
        return 0;
    }
    collect(reg, expired, &a, &l);
    if (l.n > 0) {
        n = abort_listed(reg, cat, svc, &l, "transactionLifetimeLimitSeconds");
    }
    bson_free(l.v);
    bson_free(l.txn);
    return n;
}

typedef struct match_arg {
    bool (*match)(void *arg, const shl_lsid_t *lsid);
    void *arg;
} match_arg_t;

static bool
matches(void *arg, const db_txn_t *t)
{
    const match_arg_t *m = arg;
    return m->match(m->arg, &t->lsid);
}

int
db_txn_abort_sessions(db_txn_registry_t *reg, db_session_catalog_t *cat, shl_service_ctx_t *svc,
                      bool (*match)(void *arg, const shl_lsid_t *lsid), void *arg)
{
    match_arg_t m = {match, arg};
    lsid_list_t l = {0};
    int n = 0;

    if (reg == NULL || cat == NULL) {
        return 0;
    }
    collect(reg, matches, &m, &l);
    if (l.n > 0) {
        n = abort_listed(reg, cat, svc, &l, "killSessions");
    }
    bson_free(l.v);
    bson_free(l.txn);
    return n;
}

/* ---------------------------------------------------------------- currentOp */

void
db_txn_append_op_info(const shl_op_ctx_t *op, bson_t *doc)
{
    const db_txn_t *t = op->txn;
    bson_t tx, params, rc;
    int64_t now_us = shl_clock_mono_us();
    int64_t limit = (int64_t)shl_opt_int(SHL_OPT_transactionLifetimeLimitSeconds);

    if (t == NULL) {
        return;
    }
    /* Only what does not change once the transaction started: the owner runs meanwhile. */
    BSON_APPEND_DOCUMENT_BEGIN(doc, "transaction", &tx);
    BSON_APPEND_DOCUMENT_BEGIN(&tx, "parameters", &params);
    BSON_APPEND_INT64(&params, "txnNumber", t->txn_number);
    BSON_APPEND_BOOL(&params, "autocommit", false);
    BSON_APPEND_DOCUMENT_BEGIN(&params, "readConcern", &rc);
    BSON_APPEND_UTF8(&rc, "level", t->level);
    bson_append_document_end(&params, &rc);
    bson_append_document_end(&tx, &params);
    shl_bson_append_timestamp_u64(&tx, "readTimestamp", t->read_ts);
    BSON_APPEND_DATE_TIME(&tx, "startWallClockTime", t->start_wall_ms);
    BSON_APPEND_INT64(&tx, "timeOpenMicros", now_us - t->start_mono_us);
    BSON_APPEND_DATE_TIME(&tx, "expiryTime", t->start_wall_ms + limit * 1000);
    bson_append_document_end(doc, &tx);
}

void
db_txn_append_current_op(db_txn_registry_t *reg, bson_t *arr, uint32_t *n)
{
    int64_t now_us = shl_clock_mono_us(), now_ms = shl_clock_wall_ms();

    if (reg == NULL) {
        return;
    }
    pthread_mutex_lock(&reg->mu);
    for (db_txn_t *t = reg->head; t != NULL; t = t->next) {
        bson_t d, tx, params, rc;
        char key[16];
        const char *kp;
        int64_t open_us = now_us - t->start_mono_us;
        int64_t limit = (int64_t)shl_opt_int(SHL_OPT_transactionLifetimeLimitSeconds);

        if (t->active) {
            continue; /* listed with its running operation */
        }
        bson_uint32_to_string((*n)++, &kp, key, sizeof(key));
        bson_append_document_begin(arr, kp, -1, &d);
        BSON_APPEND_UTF8(&d, "type", "idleSession");
        BSON_APPEND_BOOL(&d, "active", false);
        shl_lsid_append(&d, "lsid", &t->lsid);
        BSON_APPEND_DOCUMENT_BEGIN(&d, "transaction", &tx);
        BSON_APPEND_DOCUMENT_BEGIN(&tx, "parameters", &params);
        BSON_APPEND_INT64(&params, "txnNumber", t->txn_number);
        BSON_APPEND_BOOL(&params, "autocommit", false);
        BSON_APPEND_DOCUMENT_BEGIN(&params, "readConcern", &rc);
        BSON_APPEND_UTF8(&rc, "level", t->level);
        bson_append_document_end(&params, &rc);
        bson_append_document_end(&tx, &params);
        shl_bson_append_timestamp_u64(&tx, "readTimestamp", t->read_ts);
        BSON_APPEND_DATE_TIME(&tx, "startWallClockTime", t->start_wall_ms);
        BSON_APPEND_INT64(&tx, "timeOpenMicros", open_us);
        BSON_APPEND_INT64(&tx, "timeActiveMicros", 0);
        BSON_APPEND_INT64(&tx, "timeInactiveMicros", now_us - t->last_active_mono_us);
        if (t->state == TXN_PREPARED) {
            shl_bson_append_timestamp_u64(&tx, "prepareTimestamp", t->prepare_ts);
        } else {
            BSON_APPEND_DATE_TIME(&tx, "expiryTime", now_ms - open_us / 1000 + limit * 1000);
        }
        bson_append_document_end(&d, &tx);
        BSON_APPEND_UTF8(&d, "desc", "inactive transaction");
        bson_append_document_end(arr, &d);
    }
    pthread_mutex_unlock(&reg->mu);
}
