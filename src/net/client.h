/*
 * client.h -- the internal client (DESIGN.md section 4 "Egress"): connections to other
 * Shale processes with the internalClient handshake, a pool of them per remote host,
 * running one command, and fan-out (send N requests, then collect N replies in one poll
 * loop, so a scatter to N hosts costs one round trip). Gossip hooks let the vector clock
 * add fields to every outgoing command and see every reply.
 */
#ifndef SHL_NET_CLIENT_H
#define SHL_NET_CLIENT_H

#include <bson/bson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"

/* The wire versions this client speaks, sent as hello's internalClient. */
#define SHL_CLIENT_MIN_WIRE_VERSION 0
#define SHL_CLIENT_MAX_WIRE_VERSION 21

/* An operation key (clientOperationKey) is a UUID of this many bytes. */
#define SHL_CLIENT_OP_KEY_LEN 16

/* "host:port" longer than this is refused with FailedToParse. */
#define SHL_CLIENT_HOST_MAX 256

typedef struct shl_conn_pool shl_conn_pool_t;
typedef struct shl_client_conn shl_client_conn_t;

/*
 * Gossip hooks. 'decorate' appends fields to every outgoing command (the handshake's
 * hello included) after the caller's fields and before $db; 'cmd_name' is the command's
 * first key. 'observe' sees every reply received (ok or not), before the caller does;
 * it is not called for network errors. Both run on the calling thread without any pool
 * lock held, possibly on many threads at once, so they must be thread-safe; they must
 * not call back into the client. Either may be NULL.
 */
typedef struct shl_client_hooks {
    void (*decorate)(void *arg, const char *host, const char *cmd_name, bson_t *cmd);
    void (*observe)(void *arg, const char *host, const bson_t *reply);
    void *arg;
} shl_client_hooks_t;

/*
 * Internal authentication (auth/, with --keyFile): how every new outgoing connection
 * authenticates during its handshake. 'begin' adds its first step to the handshake hello
 * (speculativeAuthenticate) and returns the conversation's state; 'step' reads a reply (the
 * hello's, then each next step's) and either fills 'next' (initialised empty by the caller)
 * with the next command to send on database 'local', or leaves it empty when the
 * conversation is complete; an error fails the connection. 'end' frees the state. All run
 * on the connecting thread and must be thread-safe.
 */
typedef struct shl_client_auth {
    void *(*begin)(bson_t *hello);
    int (*step)(void *state, const bson_t *reply, bson_t *next, shl_status_t *st);
    void (*end)(void *state);
} shl_client_auth_t;

/*
 * shl_client_set_auth --
 *     Install the process's internal authentication (NULL: none, the default). Call once
 *     at start-up before any connection is made; read without a lock afterwards.
 */
void shl_client_set_auth(const shl_client_auth_t *auth);

typedef struct shl_conn_pool_options {
    int max_idle_per_host;      /* idle connections kept per host; 0: 16 */
    int64_t connect_timeout_ms; /* bound on connect + handshake within a call; 0: 10000 */
    shl_client_hooks_t hooks;   /* optional; see shl_conn_pool_set_hooks */
} shl_conn_pool_options_t;

/* What the peer said in the handshake. */
typedef struct shl_client_peer {
    int32_t min_wire_version;
    int32_t max_wire_version;
    int64_t connection_id; /* the id the peer gave this connection */
    int32_t max_bson_object_size;
    int32_t max_message_size_bytes;
    int32_t max_write_batch_size;
    bool is_router;     /* hello said msg: "isdbgrid" */
    char set_name[128]; /* replica set name, "" if none */
} shl_client_peer_t;

typedef struct shl_conn_pool_stats {
    int64_t idle;      /* connections waiting in the pool */
    int64_t in_use;    /* checked out, or being connected */
    int64_t opened;    /* connection attempts since the pool began */
    int64_t discarded; /* closed after a failure, or because the idle list was full */
} shl_conn_pool_stats_t;

/* One request of a fan-out. Everything is borrowed for the duration of the call. */
typedef struct shl_fanout_req {
    const char *host;  /* "host:port" */
    const char *db;    /* the command's $db */
    const bson_t *cmd; /* the command; a $db in it is replaced by db */
    /* NULL, or SHL_CLIENT_OP_KEY_LEN bytes sent as the command's clientOperationKey (a UUID,
     * which _killOperations can name later); 'cmd' must not hold that field then. */
    const uint8_t *op_key;
} shl_fanout_req_t;

/* One result of a fan-out; release with shl_fanout_results_cleanup. */
typedef struct shl_fanout_result {
    int code;            /* 0, or the error code (== status.code) */
    shl_status_t status; /* network error, or the reply's error (code, errmsg, labels, extra) */
    bson_t reply;        /* the reply document; empty if none arrived. Always initialised. */
    int64_t micros;      /* time from the start of the call to this result */
    bool interrupted;    /* cut off by the call's interruption (shl_client_interrupt_t) before
                          * its reply arrived: the request may still be running remotely */
    /* The host the request went to: a replica set connection string's member chosen by
     * read preference (rs_monitor.h), else the request's host ("" when none was tried).
     * A cursor opened there lives there (its getMores must go to it). */
    char host[SHL_CLIENT_HOST_MAX];
} shl_fanout_result_t;

/*
 * An interruption source for a call: 'check' returns 0 while the call may go on, else an
 * error code with *st filled (e.g. Interrupted when the caller's operation was killed). It
 * runs on the calling thread, only while the call is waiting (never on a reply that arrives
 * within the first check interval), and must not block or call back into the client.
 */
typedef struct shl_client_interrupt {
    int (*check)(void *arg, shl_status_t *st);
    void *arg;
} shl_client_interrupt_t;

/*
 * shl_conn_pool_new --
 *     A pool of connections keyed by "host:port". 'opts' may be NULL for defaults. The
 *     caller owns the pool; free it with shl_conn_pool_destroy.
 */
shl_conn_pool_t *shl_conn_pool_new(const shl_conn_pool_options_t *opts);

/*
 * shl_conn_pool_destroy --
 *     Close every idle connection and free the pool. Every checked-out connection must
 *     have been checked in and no call may be running (invariant). NULL is a no-op.
 */
void shl_conn_pool_destroy(shl_conn_pool_t *pool);

/*
 * shl_conn_pool_set_hooks --
 *     Replace the gossip hooks ('hooks' is copied; NULL clears them). Calls that have
 *     already started keep the hooks they began with. Takes the pool lock.
 */
void shl_conn_pool_set_hooks(shl_conn_pool_t *pool, const shl_client_hooks_t *hooks);

/*
 * shl_conn_pool_checkout --
 *     A connection to 'host' ("host:port"; the port defaults to 27017): an idle pooled
 *     one if a live one exists, else a new one (non-blocking connect bounded by the
 *     pool's connect timeout, TCP_NODELAY, then the internalClient hello). Blocks for
 *     at most 'timeout_ms' (<= 0: only the connect timeout bounds it), plus name
 *     resolution. *out is the caller's until shl_conn_pool_checkin; NULL on error.
 *     Takes the pool lock briefly; no I/O happens under it. Thread-safe.
 *     Errors: FailedToParse (bad host string), HostUnreachable (refused, unresolvable,
 *     closed), NetworkTimeout, SocketException, ProtocolError (garbled reply),
 *     IncompatibleServerVersion, or the hello's own error.
 */
int shl_conn_pool_checkout(shl_conn_pool_t *pool, const char *host, int64_t timeout_ms,
                           shl_client_conn_t **out, shl_status_t *st);

/*
 * shl_conn_pool_checkin --
 *     Give a checked-out connection back. A connection that saw a network or protocol
 *     error is closed; so is one that would exceed max_idle_per_host. Never blocks on
 *     the network. Takes the pool lock briefly. Thread-safe. NULL is a no-op.
 */
void shl_conn_pool_checkin(shl_conn_pool_t *pool, shl_client_conn_t *conn);

/*
 * shl_conn_pool_drop_host --
 *     Close all idle connections to 'host' (e.g. after it restarted or left the cluster);
 *     connections in use are unaffected. Takes the pool lock briefly.
 */
void shl_conn_pool_drop_host(shl_conn_pool_t *pool, const char *host);

/*
 * shl_conn_pool_stats_get --
 *     Counters for 'host', or summed over all hosts when 'host' is NULL. Takes the pool
 *     lock briefly.
 */
void shl_conn_pool_stats_get(shl_conn_pool_t *pool, const char *host, shl_conn_pool_stats_t *out);

/*
 * shl_conn_pool_hosts --
 *     The hosts the pool has connected to (or tried), sorted; a NULL-terminated array the
 *     caller frees with bson_strfreev. Takes the pool lock briefly.
 */
char **shl_conn_pool_hosts(shl_conn_pool_t *pool);

/*
 * shl_client_conn_run --
 *     Run 'cmd' on database 'db' over a checked-out connection: add the decorate hook's
 *     fields and $db, send one OP_MSG, wait for its reply for at most 'timeout_ms'
 *     (<= 0: no deadline). *reply_out is always initialised by the callee and destroyed
 *     by the caller; it holds the reply document whenever one arrived, even if ok: 0.
 *     Blocks; takes the pool lock only to copy the hooks. The connection belongs to
 *     the calling thread.
 *     Errors: network (HostUnreachable, NetworkTimeout, SocketException, ProtocolError;
 *     the connection is then marked failed and checkin closes it), BSONObjectTooLarge
 *     (nothing sent), or the reply's error via shl_status_from_reply (code, errmsg,
 *     errorLabels and the other fields as extra info).
 */
int shl_client_conn_run(shl_client_conn_t *conn, const char *db, const bson_t *cmd,
                        int64_t timeout_ms, bson_t *reply_out, shl_status_t *st);

/* shl_client_conn_peer -- the peer's handshake reply, borrowed for the connection's life. */
const shl_client_peer_t *shl_client_conn_peer(const shl_client_conn_t *conn);

/* shl_client_conn_host -- the "host:port" this connection was made to (borrowed). */
const char *shl_client_conn_host(const shl_client_conn_t *conn);

/* shl_client_conn_failed -- whether the connection saw a network or protocol error. */
bool shl_client_conn_failed(const shl_client_conn_t *conn);

/*
 * shl_client_run --
 *     Check out a connection to 'host', run 'cmd' on 'db' (as shl_client_conn_run) and
 *     check it back in. 'timeout_ms' bounds the whole call, connecting included (<= 0:
 *     only the connect timeout bounds the connecting part). *reply_out: as in
 *     shl_client_conn_run. 'host' a replica set ("set/h1,h2"): when the member's connection
 *     cannot be made, or it answers NotWritablePrimary / NotPrimaryNoSecondaryOk /
 *     NotPrimaryOrSecondary, the command goes again (up to 3 more times, within the timeout)
 *     to the member the monitor names next, as MongoDB's internal retries of idempotent
 *     commands do: callers send idempotent commands to sets (the internal protocol's are).
 *     Blocks; thread-safe. Errors: those of shl_conn_pool_checkout and shl_client_conn_run.
 */
int shl_client_run(shl_conn_pool_t *pool, const char *host, const char *db, const bson_t *cmd,
                   int64_t timeout_ms, bson_t *reply_out, shl_status_t *st);

/*
 * shl_client_fanout --
 *     Run n requests at once, each on its own connection (several to one host are
 *     allowed): connect where needed and send every request before waiting on any
 *     reply, then poll(2) all the sockets and read replies as they arrive. The call
 *     takes about the slowest request's time, not the sum. 'timeout_ms' bounds the
 *     whole call (<= 0: no deadline). results[0..n) is filled in (each entry always
 *     initialised; free with shl_fanout_results_cleanup); a failure on one request
 *     does not affect the others. Blocks; thread-safe; the pool lock is taken only
 *     to check connections out and in.
 */
void shl_client_fanout(shl_conn_pool_t *pool, const shl_fanout_req_t *reqs, size_t n,
                       int64_t timeout_ms, shl_fanout_result_t *results);

/*
 * shl_client_fanout_interruptible --
 *     shl_client_fanout, also ended by 'intr' (NULL: never): while replies are outstanding
 *     the call asks intr->check about every 20 ms, and once it answers an error every request
 *     still in flight ends with that error and 'interrupted' set, its connection closed (a
 *     late reply must not be read by the connection's next user). Requests answered before
 *     keep their replies. No syscall is added to a call whose replies arrive within the
 *     first interval. Returns how many requests were cut off. Blocks; thread-safe.
 */
size_t shl_client_fanout_interruptible(shl_conn_pool_t *pool, const shl_fanout_req_t *reqs,
                                       size_t n, int64_t timeout_ms,
                                       const shl_client_interrupt_t *intr,
                                       shl_fanout_result_t *results);

/* Work of the caller's own, run on the calling thread while a fan-out's requests are in
 * flight (shl_client_fanout_local). */
typedef struct shl_client_local {
    void (*run)(void *arg);
    void *arg;
} shl_client_local_t;

/*
 * shl_client_fanout_local --
 *     shl_client_fanout that runs local->run(local->arg) once on the calling thread after
 *     every request was sent (as far as the sockets took it; a connection still being made
 *     goes on afterwards) and before waiting on any reply: a request of the caller's own
 *     process (e.g. a coordinator's own participant, run in-process) overlaps the remote
 *     ones instead of running before or after them. With n == 0 it only runs 'local'.
 *     'timeout_ms' counts from the start of the call, local work included. Blocks;
 *     thread-safe.
 */
void shl_client_fanout_local(shl_conn_pool_t *pool, const shl_fanout_req_t *reqs, size_t n,
                             int64_t timeout_ms, const shl_client_local_t *local,
                             shl_fanout_result_t *results);

/* shl_fanout_results_cleanup -- destroy the replies of n results. */
void shl_fanout_results_cleanup(shl_fanout_result_t *results, size_t n);

/*
 * shl_client_interrupt_all --
 *     The process is shutting down: every call in flight, on any pool and thread, ends at
 *     once with InterruptedAtShutdown (its connections marked failed), and so does every
 *     later call. For the server's shutdown, once running operations had their grace
 *     period: a thread waiting on another node then cannot outlive the shutdown. Never
 *     blocks; thread-safe; irreversible.
 */
void shl_client_interrupt_all(void);

#endif
