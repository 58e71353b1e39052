/*
 * client_private.h -- what client.c (connections and the I/O engine) and client_pool.c
 * (the per-host pool) share. Not for use outside src/net/client*.c.
 */
#ifndef SHL_NET_CLIENT_PRIVATE_H
#define SHL_NET_CLIENT_PRIVATE_H

#include "net/client.h"
#include "net/tls.h"

typedef struct pool_host pool_host_t;

/*
 * A connection. Owned by the pool while idle (on its host's idle list, guarded by the
 * pool lock), otherwise by the one thread that checked it out; no lock guards it then.
 */
struct shl_client_conn {
    int fd;         /* -1 until a socket exists */
    shl_tls_t *tls; /* TLS over fd (net/tls.h), NULL for a plain connection */
    shl_conn_pool_t *pool;
    pool_host_t *hp; /* the pool's entry for 'host'; lives as long as the pool */
    char host[SHL_CLIENT_HOST_MAX];
    shl_client_peer_t peer;       /* filled by the handshake */
    bool ready;                   /* the handshake completed */
    bool failed;                  /* a network/protocol error happened: never reuse */
    bool is_unix;                 /* connected over the peer's Unix domain socket */
    int64_t idle_since_us;        /* when it last went back to the idle list (monotonic) */
    struct shl_client_conn *next; /* the idle list; guarded by the pool lock */
};

/*
 * client_pool_acquire --
 *     Under the pool lock: find or create the entry for 'host', count the caller as a
 *     user, and pop the most recently used idle connection. Returns it, or a new
 *     unconnected connection (fd -1, ready false) for the caller to connect. Either way
 *     the caller gives it back with client_pool_release.
 */
shl_client_conn_t *client_pool_acquire(shl_conn_pool_t *pool, const char *host);

/*
 * client_pool_release --
 *     Give back a connection from client_pool_acquire: keep it idle if it is ready, not
 *     failed and the idle list has room; otherwise close it (after dropping the lock).
 */
void client_pool_release(shl_conn_pool_t *pool, shl_client_conn_t *conn);

/* client_pool_hooks -- a copy of the pool's hooks (pool lock taken briefly). */
void client_pool_hooks(shl_conn_pool_t *pool, shl_client_hooks_t *hooks);

/* client_pool_connect_timeout_ms -- the pool's connect timeout (immutable). */
int64_t client_pool_connect_timeout_ms(const shl_conn_pool_t *pool);

/* client_conn_close -- close the socket and free the connection; no lock needed. */
void client_conn_close(shl_client_conn_t *conn);

#endif
