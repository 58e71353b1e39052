/*
 * internal_auth.c -- internal authentication with --keyFile (docs/design/auth.md
 * "Internal authentication"): the key file is read and checked as MongoDB does (no group
 * or other permissions, base64 characters, 6 to 1024 of them, whitespace ignored); its
 * content is the password of the __system user of database "local", whose credentials
 * live only in memory; every outgoing connection of the internal client authenticates as
 * __system with SCRAM-SHA-256 inside its handshake (speculativeAuthenticate, then one
 * saslContinue with skipEmptyExchange). Each new connection pays one PBKDF2 (15000
 * iterations of SHA-256, about 5 ms); pooled connections are reused.
 */
#include "auth/auth_private.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <pthread.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/options.h"
#include "base/str.h"
#include "net/client.h"

/* Set once at start-up (before serving), then read-only. */
static char key_pw[1100];
static bool have_key;
static shl_scram_creds_t system_creds[2];
/* Who the internal client authenticates as (__system@local with the key, or a user of
 * `shale status --username`), its SCRAM-SHA-256 prepared password. */
static char client_user[256] = "__system";
static char client_db[64] = "local";
static char *client_pw;

/* The keys PBKDF2 made for each peer's salt, so a new connection to a known peer costs
 * HMACs only. Guarded by keys_mu. */
#define KEYS_CACHED 32
static pthread_mutex_t keys_mu = PTHREAD_MUTEX_INITIALIZER;
static shl_scram_client_keys_t keys_cache[KEYS_CACHED];
static unsigned keys_next; /* guarded by keys_mu */

int
shl_auth_read_key_file(const char *path, char *out, size_t n, shl_status_t *st)
{
    int ret = 0, fd = -1;
    struct stat sb;
    char buf[4096];
    ssize_t got;
    size_t o = 0;

    if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0 || fstat(fd, &sb) != 0) {
        SHL_FAIL(st, SHL_CODE_BAD_VALUE, "error opening file: %s: %s", path, strerror(errno));
    }
    if ((sb.st_mode & (S_IRWXG | S_IRWXO)) != 0) {
        SHL_FAIL(st, SHL_CODE_BAD_VALUE, "permissions on %s are too open", path);
    }
    if ((got = read(fd, buf, sizeof(buf) - 1)) < 0) {
        SHL_FAIL(st, SHL_CODE_BAD_VALUE, "error reading file %s: %s", path, strerror(errno));
    }
    for (ssize_t i = 0; i < got; i++) {
        char c = buf[i];
        if (isspace((unsigned char)c)) {
            continue;
        }
        if (!isalnum((unsigned char)c) && c != '+' && c != '/' && c != '=') {
            SHL_FAIL(st, SHL_CODE_BAD_VALUE, "invalid char in key file %s: %c", path, c);
        }
        if (o + 1 >= n) {
            SHL_FAIL(st, SHL_CODE_BAD_VALUE, "key file too long: %s", path);
        }
        out[o++] = c;
    }
    out[o] = '\0';
    if (o < 6) {
        SHL_FAIL(st, SHL_CODE_BAD_VALUE, "security key in %s has length %zu, must be at least 6",
                 path, o);
    }
    if (o > 1024) {
        SHL_FAIL(st, SHL_CODE_BAD_VALUE, "security key in %s is longer than 1024 characters",
                 path);
    }
done:
    OPENSSL_cleanse(buf, sizeof(buf));
    if (fd >= 0) {
        close(fd);
    }
    return ret;
}

bool
auth_system_creds(const char *db, const char *user, shl_scram_mech_t mech, shl_scram_creds_t *c)
{
    if (!have_key || strcmp(db, "local") != 0 || strcmp(user, "__system") != 0) {
        return false;
    }
    *c = system_creds[mech];
    return true;
}

/* ---- the client side ---- */

typedef struct client_conv {
    char nonce[64];
    char bare[700];
    char expect_sig[SHL_SCRAM_B64_MAX];
    int step;
} client_conv_t;

static void *
client_begin(bson_t *hello)
{
    client_conv_t *c = bson_malloc0(sizeof(*c));
    uint8_t rnd[18];
    bson_t spec, opts;
    char first[720];

    char user[600];
    size_t o = 0;

    /* RFC 5802's saslname: ',' and '=' escaped. */
    for (const char *u = client_user; *u != '\0' && o + 4 < sizeof(user); u++) {
        if (*u == ',' || *u == '=') {
            o += (size_t)snprintf(user + o, sizeof(user) - o, "=%s", *u == ',' ? "2C" : "3D");
        } else {
            user[o++] = *u;
        }
    }
    user[o] = '\0';
    RAND_bytes(rnd, sizeof(rnd));
    EVP_EncodeBlock((unsigned char *)c->nonce, rnd, sizeof(rnd));
    snprintf(c->bare, sizeof(c->bare), "n=%s,r=%s", user, c->nonce);
    snprintf(first, sizeof(first), "n,,%s", c->bare);
    BSON_APPEND_DOCUMENT_BEGIN(hello, "speculativeAuthenticate", &spec);
    BSON_APPEND_INT32(&spec, "saslStart", 1);
    BSON_APPEND_UTF8(&spec, "mechanism", "SCRAM-SHA-256");
    bson_append_binary(&spec, "payload", -1, BSON_SUBTYPE_BINARY, (const uint8_t *)first,
                       (uint32_t)strlen(first));
    BSON_APPEND_UTF8(&spec, "db", client_db);
    BSON_APPEND_DOCUMENT_BEGIN(&spec, "options", &opts);
    BSON_APPEND_BOOL(&opts, "skipEmptyExchange", true);
    bson_append_document_end(&spec, &opts);
    bson_append_document_end(hello, &spec);
    return c;
}

static bool
payload_of(const bson_t *doc, const char *path, char *out, size_t n)
{
    bson_iter_t it, f;
    const uint8_t *b;
    uint32_t l;
    bson_subtype_t sub;
    if (!bson_iter_init(&it, doc) || !bson_iter_find_descendant(&it, path, &f) ||
        !BSON_ITER_HOLDS_BINARY(&f)) {
        return false;
    }
    bson_iter_binary(&f, &sub, &l, &b);
    if (l + 1 > n) {
        return false;
    }
    memcpy(out, b, l);
    out[l] = '\0';
    return true;
}

static int
client_step(void *state, const bson_t *reply, bson_t *next, shl_status_t *st)
{
    int ret = 0;
    client_conv_t *c = state;
    char server_first[SHL_SCRAM_MAX_MESSAGE], final_np[SHL_SCRAM_MAX_MESSAGE],
        msg[SHL_SCRAM_MAX_MESSAGE + SHL_SCRAM_B64_MAX + 8], proof[SHL_SCRAM_B64_MAX];
    const char *r;
    shl_scram_client_keys_t keys;

    if (c->step == 0) {
        if (!payload_of(reply, "speculativeAuthenticate.payload", server_first,
                        sizeof(server_first)) ||
            strncmp(server_first, "r=", 2) != 0 ||
            strncmp(server_first + 2, c->nonce, strlen(c->nonce)) != 0) {
            SHL_FAIL(st, SHL_CODE_AUTHENTICATION_FAILED,
                     "Authentication failed: the peer refused the credentials");
        }
        r = server_first + 2;
        snprintf(final_np, sizeof(final_np), "c=biws,r=%.*s", (int)strcspn(r, ","), r);
        /* A cached derivation for this server-first's salt, if there is one. */
        memset(&keys, 0, sizeof(keys));
        pthread_mutex_lock(&keys_mu);
        for (unsigned i = 0; i < KEYS_CACHED; i++) {
            size_t sl = strlen(keys_cache[i].salt);
            const char *sp = strstr(server_first, ",s=");
            if (sl > 0 && sp != NULL && strncmp(sp + 3, keys_cache[i].salt, sl) == 0 &&
                sp[3 + sl] == ',') {
                keys = keys_cache[i];
            }
        }
        pthread_mutex_unlock(&keys_mu);
        {
            char had[SHL_SCRAM_B64_MAX];
            snprintf(had, sizeof(had), "%s", keys.salt);
            SHL_ERR(shl_scram_client_proof(SHL_SCRAM_SHA256, client_pw, c->bare, server_first,
                                           final_np, proof, sizeof(proof), c->expect_sig,
                                           sizeof(c->expect_sig), &keys, st));
            if (strcmp(had, keys.salt) != 0) {
                pthread_mutex_lock(&keys_mu);
                keys_cache[keys_next++ % KEYS_CACHED] = keys;
                pthread_mutex_unlock(&keys_mu);
            }
        }
        OPENSSL_cleanse(&keys, sizeof(keys));
        snprintf(msg, sizeof(msg), "%s,p=%s", final_np, proof);
        BSON_APPEND_INT32(next, "saslContinue", 1);
        BSON_APPEND_INT32(next, "conversationId", 1);
        bson_append_binary(next, "payload", -1, BSON_SUBTYPE_BINARY, (const uint8_t *)msg,
                           (uint32_t)strlen(msg));
        c->step = 1;
    } else {
        bson_iter_t it;
        SHL_ERR(shl_status_from_reply(reply, st));
        if (!payload_of(reply, "payload", msg, sizeof(msg)) || strncmp(msg, "v=", 2) != 0 ||
            strcmp(msg + 2, c->expect_sig) != 0 || !bson_iter_init_find(&it, reply, "done") ||
            !bson_iter_as_bool(&it)) {
            SHL_FAIL(st, SHL_CODE_AUTHENTICATION_FAILED,
                     "Authentication failed: the peer's SCRAM signature does not match");
        }
    }
done:
    return ret;
}

static void
client_end(void *state)
{
    OPENSSL_cleanse(state, sizeof(client_conv_t));
    bson_free(state);
}

static const shl_client_auth_t client_auth = {client_begin, client_step, client_end};

/* clusterAuthMode x509: the hello asks to authenticate with the connection's certificate
 * (tlsClusterFile), and the peer's hello reply must say it did. */
static void *
x509_begin(bson_t *hello)
{
    bson_t spec;

    BSON_APPEND_DOCUMENT_BEGIN(hello, "speculativeAuthenticate", &spec);
    BSON_APPEND_INT32(&spec, "authenticate", 1);
    BSON_APPEND_UTF8(&spec, "mechanism", "MONGODB-X509");
    BSON_APPEND_UTF8(&spec, "db", "$external");
    bson_append_document_end(hello, &spec);
    return bson_malloc0(1); /* no state; the engine wants one */
}

static int
x509_step(void *state, const bson_t *reply, bson_t *next, shl_status_t *st)
{
    int ret = 0;
    bson_iter_t it;

    (void)state;
    (void)next;
    SHL_ERR(shl_status_from_reply(reply, st));
    if (!bson_iter_init_find(&it, reply, "speculativeAuthenticate") ||
        !BSON_ITER_HOLDS_DOCUMENT(&it)) {
        SHL_FAIL(st, SHL_CODE_AUTHENTICATION_FAILED,
                 "Authentication failed: the peer did not accept this member's X.509 "
                 "certificate");
    }
done:
    return ret;
}

static void
x509_end(void *state)
{
    bson_free(state);
}

static const shl_client_auth_t x509_auth = {x509_begin, x509_step, x509_end};

/* Authenticate the internal client as user@db with cleartext 'pwd'. */
static int
client_as(const char *user, const char *db, const char *pwd, shl_status_t *st)
{
    int ret = 0;
    char *prepared = NULL;
    SHL_ERR(shl_scram_password_prepare(SHL_SCRAM_SHA256, user, pwd, &prepared, st));
    shl_str_copy(client_user, sizeof(client_user), user);
    shl_str_copy(client_db, sizeof(client_db), db);
    bson_free(client_pw);
    client_pw = prepared;
    shl_client_set_auth(&client_auth);
done:
    return ret;
}

int
shl_auth_client_init(const char *path, shl_status_t *st)
{
    int ret = 0;
    SHL_ERR(shl_auth_read_key_file(path, key_pw, sizeof(key_pw), st));
    SHL_ERR(client_as("__system", "local", key_pw, st));
done:
    return ret;
}

int
shl_auth_client_init_user(const char *user, const char *db, const char *pwd, shl_status_t *st)
{
    return client_as(user, db, pwd, st);
}

int
shl_auth_key_file_create(const char *path, bool *created, shl_status_t *st)
{
    int ret = 0, fd = -1;
    uint8_t rnd[756];
    char b64[1100];
    size_t len;

    *created = false;
    if (access(path, F_OK) == 0) {
        goto done;
    }
    if (RAND_bytes(rnd, sizeof(rnd)) != 1) {
        SHL_FAIL(st, SHL_CODE_INTERNAL_ERROR, "could not make a random key");
    }
    /* The file holds at most 1024 key characters: 756 bytes make 1008. */
    len = (size_t)EVP_EncodeBlock((unsigned char *)b64, rnd, sizeof(rnd));
    b64[len++] = '\n';
    if ((fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600)) < 0 ||
        write(fd, b64, len) != (ssize_t)len) {
        SHL_FAIL(st, SHL_CODE_FILE_OPEN_FAILED, "cannot write key file %s: %s", path,
                 strerror(errno));
    }
    *created = true;
done:
    OPENSSL_cleanse(rnd, sizeof(rnd));
    OPENSSL_cleanse(b64, sizeof(b64));
    if (fd >= 0) {
        close(fd);
    }
    return ret;
}

void
shl_auth_random_password(char *out, size_t n)
{
    static const char alphabet[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    uint8_t rnd[24];
    size_t i;

    RAND_bytes(rnd, sizeof(rnd));
    for (i = 0; i < sizeof(rnd) && i + 1 < n; i++) {
        out[i] = alphabet[rnd[i] & 63];
    }
    out[i] = '\0';
    OPENSSL_cleanse(rnd, sizeof(rnd));
}

int
auth_internal_init(shl_status_t *st)
{
    int ret = 0;
    const char *path = shl_opt_str(SHL_OPT_keyFile);
    char *pw = NULL;

    if (strcmp(shl_opt_str(SHL_OPT_clusterAuthMode), "x509") == 0) {
        if (strcmp(shl_opt_str(SHL_OPT_tlsMode), "disabled") == 0) {
            SHL_FAIL(st, SHL_CODE_BAD_VALUE, "clusterAuthMode x509 requires TLS (--tlsMode)");
        }
        shl_client_set_auth(&x509_auth);
        goto done;
    }
    if (strcmp(shl_opt_str(SHL_OPT_clusterAuthMode), "keyFile") != 0) {
        SHL_FAIL(st, SHL_CODE_BAD_VALUE,
                 "clusterAuthMode %s is not supported (keyFile or x509)",
                 shl_opt_str(SHL_OPT_clusterAuthMode));
    }
    if (path[0] == '\0') {
        goto done;
    }
    SHL_ERR(shl_auth_read_key_file(path, key_pw, sizeof(key_pw), st));
    for (int m = 0; m < 2; m++) {
        shl_scram_mech_t mech = m == 0 ? SHL_SCRAM_SHA1 : SHL_SCRAM_SHA256;
        SHL_ERR(shl_scram_password_prepare(mech, "__system", key_pw, &pw, st));
        SHL_ERR(shl_scram_creds_make(mech, pw, mech == SHL_SCRAM_SHA1 ? SHL_SCRAM_SHA1_ITERATIONS
                                                                      : SHL_SCRAM_SHA256_ITERATIONS,
                                     NULL, 0, &system_creds[mech], st));
        OPENSSL_cleanse(pw, strlen(pw));
        bson_free(pw);
        pw = NULL;
    }
    have_key = true;
    SHL_ERR(client_as("__system", "local", key_pw, st));
done:
    if (pw != NULL) {
        bson_free(pw);
    }
    return ret;
}
