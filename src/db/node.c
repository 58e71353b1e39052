/*
 * node.c -- data node start-up (see node.h): opens the storage engine on --dbpath,
 * registers the CRUD/DDL commands, starts the cursor reaper and installs the hooks that
 * decorate replies (operationTime, $clusterTime on replica set members), report
 * serverStatus sections and close storage at shutdown.
 */
#include "db/node.h"

#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <time.h>

#include "base/clock.h"
#include "base/log.h"
#include "base/options.h"
#include "bson/bson_util.h"
#include "db/change_stream.h"
#include "db/db_private.h"
#include "db/index_kinds.h"
#include "db/read_concern_wait.h"
#include "db/session_catalog.h"
#include "db/txn_participant.h"
#include "db/storage_api.h"
#include "net/common_commands.h"
#include "net/cluster_time.h"
#include "net/reply_times.h"
#include "session/logical_session_cache.h"
#include "session/session_args.h"
#include "session/session_commands.h"

/* MongoDB's clientCursorMonitor wakes every 4 seconds. */
#define REAPER_PERIOD_MS 4000

static void *
reaper_main(void *arg)
{
    db_node_t *node = arg;

    shl_log_set_thread_ctx("clientcursormon");
    pthread_mutex_lock(&node->reaper_lock);
    while (!node->reaper_stop) {
        struct timespec ts;
        int n;

        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += REAPER_PERIOD_MS / 1000;
        pthread_cond_timedwait(&node->reaper_cond, &node->reaper_lock, &ts);
        if (node->reaper_stop) {
            break;
        }
        pthread_mutex_unlock(&node->reaper_lock);
        /* The timeout is read on every pass so setParameter takes effect live. */
        n = shl_cursor_manager_reap(node->cursors, shl_clock_wall_ms(),
                                    shl_opt_int(SHL_OPT_cursorTimeoutMillis));
        if (n > 0) {
            SHL_LOG_INFO(QUERY, 20529, "Cursors timed out", "count", BCON_INT32(n));
        }
        /* Transactions past transactionLifetimeLimitSeconds (MongoDB's periodic
         * abortExpiredTransactions). */
        (void)db_txn_abort_expired(node->txns, node->sessions, node->svc);
        pthread_mutex_lock(&node->reaper_lock);
    }
    pthread_mutex_unlock(&node->reaper_lock);
    return NULL;
}

static void
decorate_reply(shl_op_ctx_t *op, bson_t *reply)
{
    db_node_t *node = db_node(op);
    uint64_t ts = db_op_take_write_ts();

    if (!node->repl_set) {
        return; /* standalones return neither field, as MongoDB */
    }
    db_cmd_begin(op); /* gossip for commands that are not the data node's */
    if (ts == 0) {
        ts = db_rc_read_op_time(op);
    } else {
        db_rc_note_applied(op, ts);
    }
    shl_cluster_time_append_reply(op, reply, ts, shl_storage_clock_now(node->eng));
}

void
shl_node_clock_start_fresh(shl_service_ctx_t *svc)
{
    int64_t wall = shl_clock_wall_ms() / 1000;
    int64_t top = SHL_TS_SECS(shl_storage_clock_now(svc->storage)); /* >= the oplog top */
    int64_t next = (top > wall ? top : wall) + 1;

    shl_storage_clock_advance(svc->storage, SHL_TS_MAKE(next, 0));
    /* Behind the wall clock by at most a second: wait for it, rather than stamp writes ahead
     * of it. (A clock already ahead of the wall, from gossip, stays ahead.) */
    while (next == wall + 1 && shl_clock_wall_ms() / 1000 < next) {
        shl_sleep_ms(next * 1000 - shl_clock_wall_ms() + 1);
    }
}

static void
append_hello(shl_op_ctx_t *op, bson_t *reply)
{
    db_node_t *node = db_node(op);
    uint64_t ts;
    bson_t lw, ot;

    if (!node->repl_set) {
        return;
    }
    /* lastWrite lets drivers compute staleness (maxStalenessSeconds). */
    ts = shl_storage_all_durable(node->eng);
    BSON_APPEND_DOCUMENT_BEGIN(reply, "lastWrite", &lw);
    BSON_APPEND_DOCUMENT_BEGIN(&lw, "opTime", &ot);
    db_append_ts(&ot, "ts", ts);
    BSON_APPEND_INT64(&ot, "t", shl_storage_term(node->eng));
    bson_append_document_end(&lw, &ot);
    BSON_APPEND_DATE_TIME(&lw, "lastWriteDate", (int64_t)SHL_TS_SECS(ts) * 1000);
    /* A multi-member set's majority point is its commit point (repl_hooks.h). */
    if (node->repl.majority_ts != NULL) {
        ts = node->repl.majority_ts(node->repl.arg);
    }
    BSON_APPEND_DOCUMENT_BEGIN(&lw, "majorityOpTime", &ot);
    db_append_ts(&ot, "ts", ts);
    BSON_APPEND_INT64(&ot, "t", shl_storage_term(node->eng));
    bson_append_document_end(&lw, &ot);
    BSON_APPEND_DATE_TIME(&lw, "majorityWriteDate", (int64_t)SHL_TS_SECS(ts) * 1000);
    bson_append_document_end(reply, &lw);
}

/* serverStatus wiredTiger: the cache readings MongoDB reports under the same names, and the
 * history window in force (MongoDB 4.2's snapshot-window-settings; storage/history_window.c). */
static void
append_wired_tiger_status(db_node_t *node, bson_t *reply)
{
    shl_storage_cache_stats_t cs;
    shl_status_t st = SHL_STATUS_INIT;
    bson_t wt, cache, win, log, ty, txn;

    if (shl_storage_cache_stats(node->eng, &cs, &st) != 0) {
        return;
    }
    BSON_APPEND_DOCUMENT_BEGIN(reply, "wiredTiger", &wt);
    BSON_APPEND_DOCUMENT_BEGIN(&wt, "cache", &cache);
    BSON_APPEND_INT64(&cache, "maximum bytes configured", cs.bytes_max);
    BSON_APPEND_INT64(&cache, "bytes currently in the cache", cs.bytes_in_use);
    BSON_APPEND_INT64(&cache, "tracked dirty bytes in the cache", cs.bytes_dirty);
    BSON_APPEND_INT64(&cache, "bytes belonging to the cache overflow table in the cache",
                      cs.bytes_lookaside);
    BSON_APPEND_INT64(&cache, "cache overflow table entries", cs.lookaside_entries);
    BSON_APPEND_INT64(&cache, "cache overflow score", cs.lookaside_score);
    BSON_APPEND_INT64(&cache, "pages evicted by application threads", cs.app_evicted_pages);
    bson_append_document_end(&wt, &cache);
    BSON_APPEND_DOCUMENT_BEGIN(&wt, "thread-yield", &ty);
    BSON_APPEND_INT64(&ty, "application thread time evicting (usecs)", cs.app_evict_usecs);
    BSON_APPEND_INT64(&ty, "application thread time waiting for cache (usecs)",
                      cs.app_wait_usecs);
    bson_append_document_end(&wt, &ty);
    BSON_APPEND_DOCUMENT_BEGIN(&wt, "transaction", &txn);
    BSON_APPEND_INT64(&txn, "transaction range of timestamps currently pinned",
                      cs.pinned_ts_range);
    BSON_APPEND_INT64(&txn, "transaction range of IDs currently pinned", cs.pinned_id_range);
    bson_append_document_end(&wt, &txn);
    BSON_APPEND_DOCUMENT_BEGIN(&wt, "snapshot-window-settings", &win);
    BSON_APPEND_INT64(&win, "max target available snapshots window size in seconds",
                      shl_opt_int(SHL_OPT_minSnapshotHistoryWindowInSeconds));
    BSON_APPEND_INT64(&win, "current available snapshots window size in seconds",
                      cs.window_secs);
    bson_append_document_end(&wt, &win);
    /* Journal fsyncs: one per group of j / w:"majority" waiters, plus the periodic ones. */
    BSON_APPEND_DOCUMENT_BEGIN(&wt, "log", &log);
    BSON_APPEND_INT64(&log, "log sync operations",
                      (int64_t)shl_storage_journal_syncs(node->eng));
    bson_append_document_end(&wt, &log);
    bson_append_document_end(reply, &wt);
}

static void
append_server_status(shl_service_ctx_t *svc, bson_t *reply)
{
    db_node_t *node = svc->role_state;
    bson_t se, metrics, cur, open, ttl;

    BSON_APPEND_DOCUMENT_BEGIN(reply, "storageEngine", &se);
    BSON_APPEND_UTF8(&se, "name", "wiredTiger");
    BSON_APPEND_BOOL(&se, "supportsCommittedReads", true);
    BSON_APPEND_BOOL(&se, "oldestRequiredTimestampForCrashRecovery", false);
    BSON_APPEND_BOOL(&se, "supportsPendingDrops", true);
    BSON_APPEND_BOOL(&se, "dropPendingIdents", false);
    BSON_APPEND_BOOL(&se, "supportsSnapshotReadConcern", false);
    BSON_APPEND_BOOL(&se, "readOnly", false);
    BSON_APPEND_BOOL(&se, "persistent", true);
    BSON_APPEND_BOOL(&se, "backupCursorOpen", false);
    bson_append_document_end(reply, &se);
    append_wired_tiger_status(node, reply);
    db_uwb_append_status(node, reply);

    BSON_APPEND_DOCUMENT_BEGIN(reply, "metrics", &metrics);
    BSON_APPEND_DOCUMENT_BEGIN(&metrics, "cursor", &cur);
    BSON_APPEND_DOCUMENT_BEGIN(&cur, "open", &open);
    BSON_APPEND_INT64(&open, "total", shl_cursor_manager_count(node->cursors));
    bson_append_document_end(&cur, &open);
    bson_append_document_end(&metrics, &cur);
    BSON_APPEND_DOCUMENT_BEGIN(&metrics, "ttl", &ttl);
    BSON_APPEND_INT64(&ttl, "deletedDocuments",
                      __atomic_load_n(&node->ttl_deleted, __ATOMIC_RELAXED));
    BSON_APPEND_INT64(&ttl, "passes", __atomic_load_n(&node->ttl_passes, __ATOMIC_RELAXED));
    BSON_APPEND_INT64(&ttl, "subPasses", __atomic_load_n(&node->ttl_passes, __ATOMIC_RELAXED));
    bson_append_document_end(&metrics, &ttl);
    shl_command_registry_append_metrics(svc->commands, &metrics);
    bson_append_document_end(reply, &metrics);
    {
        bson_t t;
        BSON_APPEND_DOCUMENT_BEGIN(reply, "transactions", &t);
        db_session_catalog_append_stats(node->sessions, &t);
        db_txn_append_stats(node->txns, &t);
        bson_append_document_end(reply, &t);
    }
}

static int
op_interrupted(void *arg, shl_status_t *st)
{
    return shl_op_check_interrupt(arg, st);
}

/* Recovery's hook: what a replayed entry implies for sessions and transactions. */
static int
node_replay_derive(shl_storage_engine_t *eng, const bson_t *entry, void *arg, shl_status_t *st)
{
    int ret = db_session_replay_derive(eng, entry, NULL, st);
    if (ret == 0) {
        ret = db_txn_replay_entry(eng, entry, arg, st);
    }
    return ret;
}

/* The session arguments of a request: checked as every role checks them (a standalone
 * refuses txnNumbers). */
static int
session_begin(shl_op_ctx_t *op, const shl_command_t *cmd, shl_status_t *st)
{
    db_node_t *node = op->svc->role_state;
    int ret = 0;

    SHL_ERR(shl_lsc_vivify_op(op->svc->lsc, op, cmd, st));
    SHL_ERR(shl_session_check_args(op, cmd, node->repl_set, st));
    /* A retryable write has its session to itself until it is done. */
    if (op->has_txn_number && !op->has_autocommit && node->sessions != NULL) {
        SHL_ERR(db_session_checkout(node->sessions, op, st));
        /* A newer txnNumber ends the session's unprepared transaction. */
        /* MongoDB's rules for a retryable write on a session that ran a transaction. */
        if (db_txn_session_number(op->session) == op->txn_number) {
            bool prepared = db_txn_session_prepared(op->session);
            db_session_checkin(node->sessions, op);
            if (prepared) {
                SHL_FAIL(st, SHL_CODE_PREPARED_TRANSACTION_IN_PROGRESS,
                         "Retryable write that has been converted to a transaction is in "
                         "prepare");
            }
            SHL_FAIL(st, SHL_CODE_INCOMPLETE_TRANSACTION_HISTORY,
                     "Cannot retry a retryable write that has been converted into a "
                     "transaction");
        }
        if (db_txn_session_prepared(op->session)) {
            db_session_checkin(node->sessions, op);
            SHL_FAIL(st, SHL_CODE_PREPARED_TRANSACTION_IN_PROGRESS,
                     "Cannot change transaction number while the session has a prepared "
                     "transaction");
        }
        (void)db_txn_abort_for_session(node->txns, op->session);
    }
    /* A statement of a transaction has the session until it ends, and the transaction's
     * storage transaction for its run (txn_participant.h). */
    /* coordinateCommitTransaction names a transaction but is no statement of it: its
     * coordinator sends prepareTransaction to this node too, which must find the session
     * free (MongoDB checks the session back in before it waits for the decision). */
    if ((op->has_autocommit || op->start_transaction) &&
        strcmp(cmd->name, "coordinateCommitTransaction") != 0) {
        db_session_t *s = NULL;
        if (!op->has_txn_number) {
            SHL_FAIL(st, SHL_CODE_INVALID_OPTIONS,
                     "'autocommit' field requires a transaction number to also be specified");
        }
        if (node->sessions == NULL) {
            SHL_FAIL(st, SHL_CODE_ILLEGAL_OPERATION,
                     "Transaction numbers are only allowed on a replica set member or mongos");
        }
        if (!op->has_autocommit) {
            SHL_FAIL(st, SHL_CODE_INVALID_OPTIONS,
                     "txnNumber may only be provided for multi-document transactions and "
                     "retryable write commands. autocommit:false was not provided, and %s is "
                     "not a retryable write command.",
                     cmd->name);
        }
        SHL_ERR(db_session_checkout_txn(node->sessions, op, &s, st));
        ret = db_txn_statement_begin(node->txns, op, cmd, s, st);
        if (ret != 0) {
            db_session_checkin_txn(node->sessions, s);
            goto done;
        }
        op->txn_session = s;
        /* A transaction's statement does not wait long for a lock (MongoDB's
         * maxTransactionLockRequestTimeoutMillis; negative: wait as long as needed). */
        shl_storage_set_lock_timeout(shl_opt_int(SHL_OPT_maxTransactionLockRequestTimeoutMillis));
    }
    /* Reads that wait for a prepared transaction stop when the operation is interrupted. */
    shl_storage_set_interrupt(op_interrupted, op);
done:
    return ret;
}

static int
txn_end(shl_op_ctx_t *op, int ret, shl_status_t *st, const bson_t *reply)
{
    db_node_t *node = op->svc->role_state;

    return db_txn_statement_end(node->txns, op, ret, st, reply);
}

static void
session_end(shl_op_ctx_t *op)
{
    db_node_t *node = op->svc->role_state;

    shl_storage_set_interrupt(NULL, NULL);
    shl_storage_set_lock_timeout(-1);
    if (op->txn_session != NULL) {
        (void)db_txn_statement_end(node->txns, op, 0, NULL, NULL);
        db_session_checkin_txn(node->sessions, op->txn_session);
        op->txn_session = NULL;
    }

    if (op->session != NULL) {
        db_session_checkin(node->sessions, op);
    }
}

/* config.transactions and config.image_collection, which retryable writes write, and
 * config.system.preimages (change streams' pre-images, storage/write.h).
 * config.transactions is versioned (storage/catalog.h SHL_COLL_OPT_VERSIONED): every write of
 * a session's record is a new key, so no key's history grows with the session's writes. */
static int
create_session_collections(db_node_t *node, shl_status_t *st)
{
    static const char *const names[] = {DB_TRANSACTIONS_NS, DB_IMAGE_COLLECTION_NS,
                                        SHL_PREIMAGES_NS};
    bson_t versioned = BSON_INITIALIZER;
    int ret = 0;

    BSON_APPEND_BOOL(&versioned, SHL_COLL_OPT_VERSIONED, true);
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        shl_collection_t *c = shl_catalog_get(node->eng, names[i]);
        if (c == NULL) {
            ret = shl_catalog_create_collection(node->eng, names[i], i == 0 ? &versioned : NULL,
                                                NULL, NULL, st);
            if (ret == SHL_CODE_NAMESPACE_EXISTS) {
                shl_status_clear(st);
                ret = 0;
            }
        }
        shl_collection_release(c);
        SHL_ERR(ret);
    }
done:
    bson_destroy(&versioned);
    return ret;
}

static void
node_shutdown(shl_service_ctx_t *svc)
{
    db_node_t *node = svc->role_state;

    if (node == NULL) {
        return;
    }
    /* The session cache's thread uses the node's commands and cursors: it stops first. */
    shl_lsc_destroy(svc->lsc);
    if (node->reaper_started) {
        pthread_mutex_lock(&node->reaper_lock);
        node->reaper_stop = true;
        pthread_cond_broadcast(&node->reaper_cond);
        pthread_mutex_unlock(&node->reaper_lock);
        pthread_join(node->reaper, NULL);
        node->reaper_started = false;
        if (node->ttl_started) {
            pthread_join(node->ttl, NULL);
            node->ttl_started = false;
        }
        if (node->noop_started) {
            pthread_join(node->noop, NULL);
            node->noop_started = false;
        }
        if (node->preimages_started) {
            pthread_join(node->preimages, NULL);
            node->preimages_started = false;
        }
    }
    /* Connections are gone: destroy the cursors (they hold snapshots) before storage. */
    shl_cursor_manager_destroy(node->cursors);
    node->cursors = NULL;
    db_txn_registry_destroy(node->txns);
    node->txns = NULL;
    db_session_catalog_destroy(node->sessions);
    node->sessions = NULL;
    shl_storage_close(node->eng);
    node->eng = NULL;
    svc->storage = NULL;
    pthread_mutex_destroy(&node->reaper_lock);
    pthread_cond_destroy(&node->reaper_cond);
    svc->role_state = NULL;
    bson_free(node);
}

struct db_session_catalog *
shl_node_session_catalog(const shl_service_ctx_t *svc)
{
    const db_node_t *node = svc->role_state;

    return node != NULL ? node->sessions : NULL;
}

int64_t
shl_node_txn_started_us(const shl_service_ctx_t *svc, const shl_lsid_t *lsid, int64_t txn_number)
{
    const db_node_t *node = svc->role_state;

    return node != NULL ? db_txn_started_us(node->txns, lsid, txn_number) : 0;
}

int
shl_node_init(shl_service_ctx_t *svc, shl_command_registry_t *reg, shl_status_t *st)
{
    int ret = 0;
    db_node_t *node = bson_malloc0(sizeof(*node));
    shl_storage_options_t so;

    memset(&so, 0, sizeof(so));
    node->svc = svc;
    node->repl_set = svc->set_name[0] != '\0';
    pthread_mutex_init(&node->reaper_lock, NULL);
    pthread_cond_init(&node->reaper_cond, NULL);

    so.dbpath = shl_opt_str(SHL_OPT_dbpath);
    so.term = node->repl_set ? 1 : -1;
    /* 0 leaves the engine's default (MongoDB's: half of RAM less 1 GiB, at least 256 MiB). */
    so.cache_size_mb = (int64_t)(shl_opt_double(SHL_OPT_wiredTigerCacheSizeGB) * 1024.0);
    so.engine_config = shl_opt_str(SHL_OPT_wiredTigerEngineConfigString);
    so.keygen_factory = db_keygen_factory;
    so.replay_derive = node_replay_derive;
    so.pin_stable_at_open = node->repl_set; /* until repl has pinned what it needs */
    if (node->repl_set) {
        node->txns = db_txn_registry_new(NULL);
        so.replay_derive_arg = node->txns;
    }
    SHL_ERR(shl_storage_open(&so, &node->eng, st));
    /* Replication sees storage and the node before anything here can write or start (a
     * secondary pins its stable timestamp below the entries it has yet to apply; repl installs
     * its admission and db hooks, which the session cache and TTL threads started below ask). */
    svc->role_state = node;
    if (svc->hooks.storage_opened != NULL) {
        SHL_ERR(svc->hooks.storage_opened(svc, node->eng, st));
    }
    shl_storage_release_open_pin(node->eng);
    atomic_store(&node->last_applied, shl_storage_all_durable(node->eng));
    node->cursors = shl_cursor_manager_new();
    SHL_ERR(db_uwb_load(node, st));
    if (node->repl_set) {
        SHL_ERR(create_session_collections(node, st));
        node->sessions = db_session_catalog_new(node->eng);
        db_txn_registry_set_engine(node->txns, node->eng, node);
        SHL_ERR(db_txn_recover_prepared(node->txns, node->sessions, st));
        SHL_ERR(db_session_recover_children(node->sessions, st));
    }
    svc->storage = node->eng;
    svc->role_state = node;

    shl_common_commands_register(reg);
    db_register_find_commands(reg);
    db_register_write_commands(reg);
    db_register_ddl_commands(reg);
    db_register_list_commands(reg);
    db_register_stats_commands(reg);
    db_register_current_op_commands(reg);
    db_register_fsync_commands(reg);
    db_register_uwb_commands(reg);
    db_register_split_vector_command(reg);
    db_register_apply_ops_command(reg);
    db_register_txn_commands(reg);
    db_register_pre_image_commands(reg);
    shl_session_commands_register(reg);

    svc->hooks.decorate_reply = decorate_reply;
    svc->hooks.append_hello = append_hello;
    svc->hooks.append_server_status = append_server_status;
    svc->hooks.session_begin = session_begin;
    svc->hooks.session_end = session_end;
    svc->hooks.txn_end = txn_end;
    svc->hooks.append_op = db_txn_append_op_info;
    svc->hooks.shutdown = node_shutdown;

    if (pthread_create(&node->reaper, NULL, reaper_main, node) != 0) {
        SHL_FAIL(st, SHL_CODE_INTERNAL_ERROR, "cannot start the cursor reaper: %s",
                 strerror(errno));
    }
    node->reaper_started = true;
    if (pthread_create(&node->ttl, NULL, db_ttl_main, node) != 0) {
        pthread_mutex_lock(&node->reaper_lock);
        node->reaper_stop = true;
        pthread_cond_broadcast(&node->reaper_cond);
        pthread_mutex_unlock(&node->reaper_lock);
        pthread_join(node->reaper, NULL);
        node->reaper_started = false;
        SHL_FAIL(st, SHL_CODE_INTERNAL_ERROR, "cannot start the TTL monitor: %s", strerror(errno));
    }
    node->ttl_started = true;
    if (node->repl_set && pthread_create(&node->noop, NULL, db_noop_writer_main, node) == 0) {
        node->noop_started = true;
    }
    if (node->repl_set &&
        pthread_create(&node->preimages, NULL, db_pre_image_remover_main, node) == 0) {
        node->preimages_started = true;
    }
    /* From here on the node is the shutdown hook's to clean up, error or not. */
    ret = db_sessions_init(node, st);
    node = NULL;
done:
    if (node != NULL) {
        if (node->eng != NULL) {
            svc->hooks = (shl_service_hooks_t){0};
            svc->role_state = NULL;
            svc->storage = NULL;
            if (node->cursors != NULL) {
                shl_cursor_manager_destroy(node->cursors);
            }
            db_txn_registry_destroy(node->txns);
            node->txns = NULL;
            db_session_catalog_destroy(node->sessions);
            shl_storage_close(node->eng);
        }
        db_txn_registry_destroy(node->txns);
        pthread_mutex_destroy(&node->reaper_lock);
        pthread_cond_destroy(&node->reaper_cond);
        bson_free(node);
    }
    return ret;
}
