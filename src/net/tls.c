/*
 * tls.c -- TLS connections over OpenSSL (tls.h). Two contexts built once at start-up: the
 * server's (its certificate; the CA that client certificates must chain to) and the
 * client's, used by every outgoing connection (the cluster certificate; the CA that
 * servers' certificates must chain to).
 */
#include "net/tls.h"

#include <arpa/inet.h>
#include <errno.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/options.h"

struct shl_tls {
    SSL *ssl;
    short want; /* POLLIN/POLLOUT after an EAGAIN */
};

/* Set once by shl_tls_init, read-only afterwards. */
static shl_tls_mode_t tls_mode = SHL_TLS_DISABLED;
static bool tls_outgoing; /* outgoing TCP connections use TLS */
static SSL_CTX *server_ctx;
static SSL_CTX *client_ctx;

shl_tls_mode_t
shl_tls_mode(void)
{
    return tls_mode;
}

bool
shl_tls_outgoing(void)
{
    return tls_outgoing;
}

bool
shl_tls_looks_like_tls(const unsigned char first[2])
{
    /* A TLS record of type handshake (22), version 3.x. */
    return first[0] == 0x16 && first[1] == 0x03;
}

/* The oldest error on this thread's OpenSSL queue, as text (the queue is cleared). */
static void
ssl_error_text(char *out, size_t n)
{
    unsigned long e = ERR_get_error();
    if (e == 0) {
        snprintf(out, n, "%s", errno != 0 ? strerror(errno) : "connection closed");
    } else {
        ERR_error_string_n(e, out, n);
    }
    ERR_clear_error();
}

/* --tlsAllowInvalidCertificates: accept whatever chain the peer sends. */
static int
accept_any_certificate(int ok, X509_STORE_CTX *ctx)
{
    (void)ok;
    (void)ctx;
    return 1;
}

/* Load 'pem' (certificate then key, or key then certificate) into 'ctx'. */
static int
load_cert_key(SSL_CTX *ctx, const char *pem, shl_status_t *st)
{
    int ret = 0;
    char err[256];

    if (SSL_CTX_use_certificate_chain_file(ctx, pem) != 1 ||
        SSL_CTX_use_PrivateKey_file(ctx, pem, SSL_FILETYPE_PEM) != 1 ||
        SSL_CTX_check_private_key(ctx) != 1) {
        ssl_error_text(err, sizeof(err));
        SHL_FAIL(st, SHL_CODE_INVALID_SSL_CONFIGURATION, "Can not set up PEM key file %s: %s", pem,
                 err);
    }
done:
    return ret;
}

/* Trust the CA file, or the system's store without one. */
static int
load_ca(SSL_CTX *ctx, const char *ca, shl_status_t *st)
{
    int ret = 0;
    char err[256];

    if (ca[0] == '\0') {
        SSL_CTX_set_default_verify_paths(ctx);
    } else if (SSL_CTX_load_verify_locations(ctx, ca, NULL) != 1) {
        ssl_error_text(err, sizeof(err));
        SHL_FAIL(st, SHL_CODE_INVALID_SSL_CONFIGURATION,
                 "cannot read certificate authority file %s: %s", ca, err);
    }
done:
    return ret;
}

static SSL_CTX *
new_ctx(const SSL_METHOD *method)
{
    SSL_CTX *ctx = SSL_CTX_new(method);
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    /* Writes of a whole buffer; a retried write may come from a moved buffer (the server
     * keeps one reply buffer, but the internal client's may be reallocated). */
    SSL_CTX_set_mode(ctx, SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER | SSL_MODE_AUTO_RETRY);
    return ctx;
}

int
shl_tls_init(shl_status_t *st)
{
    int ret = 0;
    const char *mode = shl_opt_str(SHL_OPT_tlsMode);
    const char *pem = shl_opt_str(SHL_OPT_tlsCertificateKeyFile);
    const char *ca = shl_opt_str(SHL_OPT_tlsCAFile);
    const char *cluster = shl_opt_str(SHL_OPT_tlsClusterFile);
    bool any_invalid = shl_opt_bool(SHL_OPT_tlsAllowInvalidCertificates);

    if (strcmp(mode, "disabled") == 0) {
        if (pem[0] != '\0' || ca[0] != '\0' || cluster[0] != '\0') {
            SHL_FAIL(st, SHL_CODE_BAD_VALUE,
                     "TLS options such as --tlsCertificateKeyFile need --tlsMode other than "
                     "disabled");
        }
        goto done;
    } else if (strcmp(mode, "allowTLS") == 0) {
        tls_mode = SHL_TLS_ALLOW;
    } else if (strcmp(mode, "preferTLS") == 0) {
        tls_mode = SHL_TLS_PREFER;
    } else if (strcmp(mode, "requireTLS") == 0) {
        tls_mode = SHL_TLS_REQUIRE;
    } else {
        SHL_FAIL(st, SHL_CODE_BAD_VALUE, "Invalid tlsMode: %s", mode);
    }
    if (pem[0] == '\0') {
        SHL_FAIL(st, SHL_CODE_BAD_VALUE,
                 "need tlsCertificateKeyFile or certificateSelector when TLS is enabled");
    }
    server_ctx = new_ctx(TLS_server_method());
    client_ctx = new_ctx(TLS_client_method());
    SHL_ERR(load_cert_key(server_ctx, pem, st));
    SHL_ERR(load_cert_key(client_ctx, cluster[0] != '\0' ? cluster : pem, st));
    /* No session tickets: an idle pooled connection must hold no unread bytes. */
    SSL_CTX_set_num_tickets(server_ctx, 0);
    if (ca[0] != '\0') {
        SHL_ERR(load_ca(server_ctx, ca, st));
        /* As MongoDB: with a CA file, clients must present a certificate unless told
         * otherwise. */
        SSL_CTX_set_verify(server_ctx,
                           SSL_VERIFY_PEER |
                               (shl_opt_bool(SHL_OPT_tlsAllowConnectionsWithoutCertificates)
                                    ? 0
                                    : SSL_VERIFY_FAIL_IF_NO_PEER_CERT),
                           any_invalid ? accept_any_certificate : NULL);
        SSL_CTX_set_client_CA_list(server_ctx, SSL_load_client_CA_file(ca));
    }
    SHL_ERR(load_ca(client_ctx, ca, st));
    SSL_CTX_set_verify(client_ctx, SSL_VERIFY_PEER, any_invalid ? accept_any_certificate : NULL);
    tls_outgoing = tls_mode == SHL_TLS_PREFER || tls_mode == SHL_TLS_REQUIRE;
    SHL_LOG_INFO(NETWORK, 4615750, "TLS enabled", "tlsMode", BCON_UTF8(mode), "CAFile",
                 BCON_UTF8(ca));
done:
    return ret;
}

int
shl_tls_client_init(const char *ca_file, const char *pem_file, shl_status_t *st)
{
    int ret = 0;

    client_ctx = new_ctx(TLS_client_method());
    if (pem_file != NULL && pem_file[0] != '\0') {
        SHL_ERR(load_cert_key(client_ctx, pem_file, st));
    }
    SHL_ERR(load_ca(client_ctx, ca_file != NULL ? ca_file : "", st));
    SSL_CTX_set_verify(client_ctx, SSL_VERIFY_PEER,
                       shl_opt_bool(SHL_OPT_tlsAllowInvalidCertificates) ? accept_any_certificate
                                                                         : NULL);
    tls_outgoing = true;
done:
    return ret;
}

/* The handshake failed: SSLHandshakeFailed with OpenSSL's reason (the certificate check's,
 * when that is what failed). */
static void
handshake_failed(shl_tls_t *tls, shl_status_t *st)
{
    char err[256];
    long verify = SSL_get_verify_result(tls->ssl);

    ssl_error_text(err, sizeof(err));
    if (verify != X509_V_OK) {
        shl_status_set(st, SHL_CODE_SSL_HANDSHAKE_FAILED,
                       "SSL peer certificate validation failed: %s",
                       X509_verify_cert_error_string(verify));
    } else {
        shl_status_set(st, SHL_CODE_SSL_HANDSHAKE_FAILED, "SSL handshake failed: %s", err);
    }
}

static shl_tls_t *
tls_new(SSL_CTX *ctx, int fd)
{
    shl_tls_t *tls = calloc(1, sizeof(*tls));
    tls->ssl = SSL_new(ctx);
    SSL_set_fd(tls->ssl, fd);
    return tls;
}

shl_tls_t *
shl_tls_accept(int fd, shl_status_t *st)
{
    shl_tls_t *tls = tls_new(server_ctx, fd);

    ERR_clear_error();
    if (SSL_accept(tls->ssl) != 1) {
        handshake_failed(tls, st);
        shl_tls_free(tls);
        tls = NULL;
    }
    return tls;
}

shl_tls_t *
shl_tls_connect_new(int fd, const char *host, shl_status_t *st)
{
    shl_tls_t *tls = tls_new(client_ctx, fd);
    char name[256];
    size_t n = strcspn(host, ":");
    unsigned char addr[16];
    bool is_ip;

    (void)st;
    if (host[0] == '[') { /* [v6]:port */
        host++;
        n = strcspn(host, "]");
    }
    snprintf(name, sizeof(name), "%.*s", (int)n, host);
    is_ip = inet_pton(AF_INET, name, addr) == 1 || inet_pton(AF_INET6, name, addr) == 1;
    if (!is_ip) {
        SSL_set_tlsext_host_name(tls->ssl, name);
    }
    if (!shl_opt_bool(SHL_OPT_tlsAllowInvalidHostnames) &&
        !shl_opt_bool(SHL_OPT_tlsAllowInvalidCertificates)) {
        X509_VERIFY_PARAM *param = SSL_get0_param(tls->ssl);
        if (is_ip) {
            X509_VERIFY_PARAM_set1_ip_asc(param, name);
        } else {
            X509_VERIFY_PARAM_set1_host(param, name, 0);
        }
    }
    SSL_set_connect_state(tls->ssl);
    return tls;
}

/* After an SSL call that returned r <= 0: -1 with errno (EAGAIN and 'want' set when it
 * must wait), or 0 at a clean close. */
static ssize_t
io_result(shl_tls_t *tls, int r)
{
    ssize_t out = -1;
    int saved = errno;

    switch (SSL_get_error(tls->ssl, r)) {
    case SSL_ERROR_WANT_READ:
        tls->want = POLLIN;
        errno = EAGAIN;
        break;
    case SSL_ERROR_WANT_WRITE:
        tls->want = POLLOUT;
        errno = EAGAIN;
        break;
    case SSL_ERROR_ZERO_RETURN:
        out = 0;
        break;
    case SSL_ERROR_SYSCALL:
        /* errno says what the socket did; none (0) is the peer closing without a TLS close. */
        errno = saved;
        if (saved == 0) {
            out = 0;
        }
        break;
    default:
        errno = ECONNRESET;
        break;
    }
    ERR_clear_error();
    return out;
}

int
shl_tls_handshake(shl_tls_t *tls, shl_status_t *st)
{
    int r, ret = 1;

    ERR_clear_error();
    errno = 0;
    r = SSL_do_handshake(tls->ssl);
    if (r != 1) {
        int e = SSL_get_error(tls->ssl, r);
        if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
            tls->want = e == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT;
            ret = 0;
        } else {
            handshake_failed(tls, st);
            ret = -1;
        }
    }
    return ret;
}

ssize_t
shl_tls_read(shl_tls_t *tls, void *buf, size_t n)
{
    int r;

    ERR_clear_error();
    errno = 0;
    r = SSL_read(tls->ssl, buf, n > INT32_MAX ? INT32_MAX : (int)n);
    return r > 0 ? (ssize_t)r : io_result(tls, r);
}

ssize_t
shl_tls_write(shl_tls_t *tls, const void *buf, size_t n)
{
    int r;

    ERR_clear_error();
    errno = 0;
    r = SSL_write(tls->ssl, buf, n > INT32_MAX ? INT32_MAX : (int)n);
    if (r <= 0) {
        ssize_t out = io_result(tls, r);
        if (out == 0) { /* a write cannot "end cleanly" */
            errno = EPIPE;
        }
        return -1;
    }
    return (ssize_t)r;
}

short
shl_tls_want(const shl_tls_t *tls)
{
    return tls->want;
}

bool
shl_tls_peer_subject(const shl_tls_t *tls, char *out, size_t n)
{
    X509 *cert = SSL_get1_peer_certificate(tls->ssl);
    BIO *bio;
    char *data = NULL;
    long len;
    bool ok = cert != NULL && SSL_get_verify_result(tls->ssl) == X509_V_OK;

    out[0] = '\0';
    if (ok) {
        bio = BIO_new(BIO_s_mem());
        X509_NAME_print_ex(bio, X509_get_subject_name(cert), 0, XN_FLAG_RFC2253);
        len = BIO_get_mem_data(bio, &data);
        ok = len > 0 && (size_t)len < n;
        snprintf(out, n, "%.*s", ok ? (int)len : 0, data != NULL ? data : "");
        BIO_free(bio);
    }
    X509_free(cert);
    return ok;
}

/* The attribute 'nid' of 'name' joined with '+' into out[n] ("" without one). */
static void
name_attrs(X509_NAME *name, int nid, char *out, size_t n)
{
    size_t o = 0;
    int i = -1;

    out[0] = '\0';
    while ((i = X509_NAME_get_index_by_NID(name, nid, i)) >= 0 && o + 1 < n) {
        ASN1_STRING *v = X509_NAME_ENTRY_get_data(X509_NAME_get_entry(name, i));
        int w = snprintf(out + o, n - o, "%s%.*s", o > 0 ? "+" : "", ASN1_STRING_length(v),
                         (const char *)ASN1_STRING_get0_data(v));
        o = w > 0 ? o + (size_t)w : o;
    }
}

bool
shl_tls_peer_is_member(const shl_tls_t *tls)
{
    static const int nids[] = {NID_organizationName, NID_organizationalUnitName,
                               NID_domainComponent};
    X509 *peer = SSL_get1_peer_certificate(tls->ssl);
    X509 *own = SSL_get_certificate(tls->ssl);
    bool member = peer != NULL && own != NULL && SSL_get_verify_result(tls->ssl) == X509_V_OK;
    bool any = false;

    for (size_t i = 0; member && i < sizeof(nids) / sizeof(nids[0]); i++) {
        char a[512], b[512];
        name_attrs(X509_get_subject_name(peer), nids[i], a, sizeof(a));
        name_attrs(X509_get_subject_name(own), nids[i], b, sizeof(b));
        member = strcmp(a, b) == 0;
        any = any || a[0] != '\0';
    }
    X509_free(peer);
    return member && any;
}

void
shl_tls_free(shl_tls_t *tls)
{
    if (tls != NULL) {
        SSL_free(tls->ssl);
        free(tls);
    }
}
