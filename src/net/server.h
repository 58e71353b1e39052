/*
 * server.h -- the listener and the thread-per-connection service loop (MongoDB's own
 * model; --serviceExecutor shared: an epoll set and a pool of workers), and graceful shutdown: stop accepting, let running operations finish within
 * a bound, interrupt those still running, close connections, run the role's shutdown hook.
 */
#ifndef SHL_NET_SERVER_H
#define SHL_NET_SERVER_H

#include <bson/bson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "base/status.h"
#include "net/lsid.h"
#include "net/service_context.h"
#include "net/tls.h"

/* A client connection. Fields without a lock note are touched only by its own thread. */
typedef struct shl_conn {
    int64_t id;
    int fd;
    bool unix_socket; /* accepted on the Unix domain socket; read-only */
    /* The connection's TLS (net/tls.h), NULL for a plain one; set before its first
     * message. Reads and writes go through it when set. */
    shl_tls_t *tls;
    char remote[64];
    char local[64];
    shl_service_ctx_t *svc;
    bool internal;           /* hello said internalClient */
    bool hello_seen;         /* the first hello stores client metadata */
    char app_name[128];      /* client.application.name from the first hello */
    bson_t *client_metadata; /* the first hello's client document, or NULL */
    atomic_bool close_now;   /* set by failCommand closeConnection / shutdown */
    atomic_bool in_op;       /* an operation is running on this connection */
    void *auth; /* its authentication state (auth/), freed by hooks.conn_end; own thread */
    /* With access control, a client that may not advance the cluster time (it lacks
     * advanceClusterTime): set by hooks.authorize before each command; own thread. */
    bool clock_untrusted;
    /* The authenticated user: the digest of its "user@db" (the empty name's without one),
     * which is its sessions' lsid.uid and its cursors' owner, and whether it is __system
     * (the cluster, which acts for any user). Set by auth at login and logout; own thread. */
    uint8_t user_digest[SHL_LSID_UID_LEN];
    bool system_user;
    pthread_t thread;
    /* Under --serviceExecutor shared: the bytes received and not yet handled, rbuf[0, rhave)
     * of rcap; touched only by the worker that holds the connection (one at a time: its
     * descriptor is armed EPOLLONESHOT), 'handover' orders one holder before the next;
     * 'arming' is set while a worker re-arms it, and the next holder starts only once it
     * is clear (so the re-arming epoll_ctl happened before anything it does, close too). */
    uint8_t *rbuf;
    size_t rcap, rhave;
    atomic_int handover;
    atomic_bool arming;
    struct shl_conn *next; /* the server's list; guarded by the server's lock */
} shl_conn_t;

/*
 * shl_server_start --
 *     Bind 'bind_ip' (comma-separated) on 'port' and start the listener thread.
 *     Errors: SocketException (address in use, bad address).
 */
int shl_server_start(shl_service_ctx_t *svc, const char *bind_ip, int port, shl_status_t *st);

/*
 * shl_server_wait --
 *     Block until shutdown completes (signal, shutdown command); returns the exit code.
 */
int shl_server_wait(shl_service_ctx_t *svc);

/*
 * shl_server_request_shutdown --
 *     Begin a graceful shutdown with 'timeout_ms' for running operations (-1: the
 *     shutdownTimeoutMillisForSignaledShutdown option). Async-signal-safe when
 *     timeout_ms is -1. Returns immediately.
 */
void shl_server_request_shutdown(shl_service_ctx_t *svc, int64_t timeout_ms);

/*
 * shl_server_shutdown_and_wait --
 *     shl_server_request_shutdown (timeout_ms >= 0), then wait until the listener has taken
 *     the request: on a router, quiesce mode has begun (hello answers ShutdownInProgress)
 *     when this returns, so the shutdown command's client, whose connection closes next,
 *     finds the router quiescing. Not for signal handlers.
 */
void shl_server_shutdown_and_wait(shl_service_ctx_t *svc, int64_t timeout_ms);

/*
 * shl_server_shutdown_requested --
 *     Whether a shutdown was asked for (a signal), also before the listener started: a
 *     role's start-up that waits (a router waiting for its config server) stops waiting,
 *     and a server started after such a request shuts down at once.
 */
bool shl_server_shutdown_requested(void);

/* shl_server_install_signal_handlers -- SIGTERM/SIGINT start a shutdown (also one asked for
 * during start-up, before the listener exists); ignore SIGPIPE. */
void shl_server_install_signal_handlers(shl_service_ctx_t *svc);

#endif
