/*
 * txn_router_private.h -- the router's transaction state, shared by txn_router.c (statements)
 * and cluster_txn.c (commit / abort). Not for use outside src/router.
 */
#ifndef SHL_ROUTER_TXN_ROUTER_PRIVATE_H
#define SHL_ROUTER_TXN_ROUTER_PRIVATE_H

#include "router/cluster_routing.h"
#include "router/txn_router.h"

/* The participants one transaction may have (a cluster's shards). */
#define ROUTER_TXN_MAX_PARTICIPANTS 64

typedef struct participant {
    char shard[SHL_SHARD_ID_MAX];
    bool read_only;     /* no write seen from it yet */
    int64_t created_at; /* the statement (router_txn_t.stmt) that started it */
    int64_t touched_at; /* the last statement that sent it a request */
} participant_t;

/* One logical session's transaction on this router. */
struct router_txn {
    /* guarded by the catalog's mutex */
    shl_lsid_t lsid;
    bool checked_out;
    bool killed;          /* killSessions matched it: its transaction ends at the next checkout */
    int64_t last_used_us; /* monotonic; an idle state past the session timeout is freed */
    struct router_txn *next;

    /* the rest: only by the operation that has the state checked out */
    int64_t txn_number;     /* -1: none yet */
    bool dead;              /* killed by killSessions: txn_number continues nowhere */
    int64_t stmt;           /* statements of this transaction so far (the current one) */
    bool recovering_commit; /* a commit of a txnNumber this router did not run */
    bool has_read_concern;
    bson_t read_concern;      /* what the first statement to each participant carries */
    uint64_t at_cluster_time; /* snapshot: chosen once (0: none) */
    bool at_given;            /* the client's atClusterTime: never changed */
    bool snapshot_retry;      /* a snapshot error the first statement retries at a new time */
    participant_t parts[ROUTER_TXN_MAX_PARTICIPANTS]; /* in contact order */
    size_t nparts;
    int coordinator;                       /* index in parts, -1: none */
    char recovery_shard[SHL_SHARD_ID_MAX]; /* first participant that wrote ("": none) */
    router_commit_type_t commit_type;
    bool raw_send;      /* the router's own decision requests: sent as built */
    bool stale_refused; /* a stale error this statement may not retry (below) */
    int stale_result_code;
    shl_status_t stale_status;
    bool internal; /* the transaction API's (txn_api.h): owned by its operation, no catalog */
    bool probe;    /* the current statement is a write command that cannot write */
};

/* router_txn_internal_new / _free -- a transaction of the transaction API on internal
 * session 'lsid', number 'txn_number', outside the catalog. */
router_txn_t *router_txn_internal_new(const shl_lsid_t *lsid, int64_t txn_number);
void router_txn_internal_free(router_txn_t *t);

/* router_txn_internal_statement -- the next statement of an internal transaction begins. */
void router_txn_internal_statement(router_txn_t *t);

/* router_txn_internal_probe -- as router_txn_internal_statement, for a write command whose
 * filter matches nothing (a retryable write's history probe, cluster_write_wsk.c): its
 * shards stay read-only participants (no two-phase commit for it). */
void router_txn_internal_probe(router_txn_t *t);

/* router_txn_transient -- MongoDB's isTransientTransactionError. */
bool router_txn_transient(int code, bool has_wce, bool commit_or_abort);

/* router_txn_set_token -- remember t's recoveryToken for this thread's reply. */
void router_txn_set_token(const router_txn_t *t);

#endif
