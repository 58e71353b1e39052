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
    char bare[128];
    char expect_sig[SHL_SCRAM_B64_MAX];
    int step;
} client_conv_t;

static void *
client_begin(bson_t *hello)
{
    client_conv_t *c = bson_malloc0(sizeof(*c));
    uint8_t rnd[18];
    bson_t spec, opts;
    char first[160];

    RAND_bytes(rnd, sizeof(rnd));
    EVP_EncodeBlock((unsigned char *)c->nonce, rnd, sizeof(rnd));
    snprintf(c->bare, sizeof(c->bare), "n=__system,r=%s", c->nonce);
    snprintf(first, sizeof(first), "n,,%s", c->bare);
    BSON_APPEND_DOCUMENT_BEGIN(hello, "speculativeAuthenticate", &spec);
    BSON_APPEND_INT32(&spec, "saslStart", 1);
    BSON_APPEND_UTF8(&spec, "mechanism", "SCRAM-SHA-256");
    bson_append_binary(&spec, "payload", -1, BSON_SUBTYPE_BINARY, (const uint8_t *)first,
                       (uint32_t)strlen(first));
    BSON_APPEND_UTF8(&spec, "db", "local");
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
        msg[SHL_SCRAM_MAX_MESSAGE + SHL_SCRAM_B64_MAX + 8], proof[SHL_SCRAM_B64_MAX], *pw = NULL;
    const char *r;

    if (c->step == 0) {
        if (!payload_of(reply, "speculativeAuthenticate.payload", server_first,
                        sizeof(server_first)) ||
            strncmp(server_first, "r=", 2) != 0 ||
            strncmp(server_first + 2, c->nonce, strlen(c->nonce)) != 0) {
            SHL_FAIL(st, SHL_CODE_AUTHENTICATION_FAILED,
                     "Authentication failed: the peer refused this cluster member's key");
        }
        r = server_first + 2;
        snprintf(final_np, sizeof(final_np), "c=biws,r=%.*s", (int)strcspn(r, ","), r);
        SHL_ERR(shl_scram_password_prepare(SHL_SCRAM_SHA256, "__system", key_pw, &pw, st));
        SHL_ERR(shl_scram_client_proof(SHL_SCRAM_SHA256, pw, c->bare, server_first, final_np,
                                       proof, sizeof(proof), c->expect_sig,
                                       sizeof(c->expect_sig), st));
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
    if (pw != NULL) {
        OPENSSL_cleanse(pw, strlen(pw));
        bson_free(pw);
    }
    return ret;
}

static void
client_end(void *state)
{
    OPENSSL_cleanse(state, sizeof(client_conv_t));
    bson_free(state);
}

static const shl_client_auth_t client_auth = {client_begin, client_step, client_end};

int
shl_auth_client_init(const char *path, shl_status_t *st)
{
    int ret = 0;
    SHL_ERR(shl_auth_read_key_file(path, key_pw, sizeof(key_pw), st));
    shl_client_set_auth(&client_auth);
done:
    return ret;
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

    if (path[0] == '\0') {
        goto done;
    }
    if (strcmp(shl_opt_str(SHL_OPT_clusterAuthMode), "keyFile") != 0) {
        SHL_FAIL(st, SHL_CODE_BAD_VALUE, "clusterAuthMode %s is not supported (keyFile only)",
                 shl_opt_str(SHL_OPT_clusterAuthMode));
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
    shl_client_set_auth(&client_auth);
done:
    if (pw != NULL) {
        bson_free(pw);
    }
    return ret;
}
