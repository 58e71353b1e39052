/*
 * tls.h -- TLS for client and internal connections (docs/design/auth.md "TLS"), over
 * OpenSSL. The options (--tlsMode, --tlsCertificateKeyFile, --tlsCAFile, ...) are read
 * once by shl_tls_init; after that every function here is thread-safe (one shl_tls_t per
 * connection, used by one thread at a time).
 *
 * Connections use TLS through the few calls below (accept/connect, read, write, free), so
 * the socket layer that owns the file descriptor -- the thread-per-connection server, the
 * internal client's poll loop -- keeps its own structure; a plain connection has no
 * shl_tls_t and pays nothing.
 */
#ifndef SHL_NET_TLS_H
#define SHL_NET_TLS_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "base/status.h"

typedef enum shl_tls_mode {
    SHL_TLS_DISABLED,
    SHL_TLS_ALLOW,   /* accept TLS and plain; connect plain */
    SHL_TLS_PREFER,  /* accept TLS and plain; connect with TLS */
    SHL_TLS_REQUIRE, /* accept only TLS; connect with TLS */
} shl_tls_mode_t;

/* One TLS connection (an OpenSSL SSL object over a socket). */
typedef struct shl_tls shl_tls_t;

/*
 * shl_tls_init --
 *     Read the tls* options and build the server and client contexts. Call once at
 *     start-up, before the listener and before any outgoing connection.
 *     Errors: BadValue (unknown mode, a mode without --tlsCertificateKeyFile, a TLS option
 *     with tlsMode disabled), InvalidSSLConfiguration (a file that cannot be read or a key
 *     that does not match its certificate).
 */
int shl_tls_init(shl_status_t *st);

/*
 * shl_tls_client_init --
 *     For a tool that only connects (`shale status --tls`): every outgoing TCP connection
 *     uses TLS, trusting 'ca_file' (the system's store when NULL or ""), presenting
 *     'pem_file' when given. Errors: InvalidSSLConfiguration.
 */
int shl_tls_client_init(const char *ca_file, const char *pem_file, shl_status_t *st);

/* shl_tls_mode -- the configured mode (disabled before shl_tls_init). */
shl_tls_mode_t shl_tls_mode(void);

/* shl_tls_outgoing -- whether outgoing TCP connections use TLS (preferTLS, requireTLS). */
bool shl_tls_outgoing(void);

/*
 * shl_tls_looks_like_tls --
 *     Whether the first two bytes a client sent open a TLS handshake (a handshake record,
 *     protocol major version 3) rather than a wire-protocol message.
 */
bool shl_tls_looks_like_tls(const unsigned char first[2]);

/*
 * shl_tls_accept --
 *     Server side: run the handshake on the blocking socket 'fd'. Returns the connection,
 *     or NULL with SSLHandshakeFailed in 'st' (the peer's certificate was refused, the
 *     peer is not speaking TLS...).
 */
shl_tls_t *shl_tls_accept(int fd, shl_status_t *st);

/*
 * shl_tls_connect_new --
 *     Client side: a TLS connection over the connected non-blocking socket 'fd' to 'host'
 *     ("name:port"; the name is checked against the peer's certificate unless
 *     --tlsAllowInvalidHostnames). Drive its handshake with shl_tls_handshake.
 */
shl_tls_t *shl_tls_connect_new(int fd, const char *host, shl_status_t *st);

/*
 * shl_tls_handshake --
 *     One step of a client handshake on a non-blocking socket: 1 done, 0 in progress (poll
 *     for shl_tls_want), -1 failed (SSLHandshakeFailed in 'st').
 */
int shl_tls_handshake(shl_tls_t *tls, shl_status_t *st);

/*
 * shl_tls_read / shl_tls_write --
 *     As recv/send: the byte count, 0 from read at the peer's close, or -1 with errno set
 *     (EAGAIN on a non-blocking socket when the connection must wait: poll for
 *     shl_tls_want; ECONNRESET for a TLS-level failure).
 */
ssize_t shl_tls_read(shl_tls_t *tls, void *buf, size_t n);
ssize_t shl_tls_write(shl_tls_t *tls, const void *buf, size_t n);

/* shl_tls_want -- POLLIN or POLLOUT: what the last call that returned EAGAIN waits for. */
short shl_tls_want(const shl_tls_t *tls);

/*
 * shl_tls_peer_subject --
 *     The peer certificate's subject in RFC 2253 form ("CN=alice,OU=clients,O=Shale,C=US")
 *     into out[n]. False, with "", when the peer sent no certificate or one that was not
 *     verified (--tlsAllowInvalidCertificates lets such peers connect, never authenticate).
 */
bool shl_tls_peer_subject(const shl_tls_t *tls, char *out, size_t n);

/*
 * shl_tls_peer_is_member --
 *     Whether the peer's verified certificate names a cluster member, as MongoDB decides it:
 *     its subject's O, OU and DC attributes are those of this process's own certificate (at
 *     least one of them present).
 */
bool shl_tls_peer_is_member(const shl_tls_t *tls);

/* shl_tls_free -- free the connection (the socket stays open: its owner closes it). */
void shl_tls_free(shl_tls_t *tls);

#endif
