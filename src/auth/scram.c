/*
 * scram.c -- SCRAM-SHA-1 / SCRAM-SHA-256 server conversations and credentials
 * (scram.h; RFC 5802, RFC 7677; docs/design/auth.md "SCRAM"). Every primitive is
 * OpenSSL's (PBKDF2, HMAC, SHA, MD5, RAND, base64) and SASLprep is libidn's stringprep.
 */
#include "auth/scram.h"

#include <bson/bson.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <stringprep.h>
#include <string.h>

static const EVP_MD *
md_of(shl_scram_mech_t mech)
{
    return mech == SHL_SCRAM_SHA1 ? EVP_sha1() : EVP_sha256();
}

static size_t
hash_len(shl_scram_mech_t mech)
{
    return mech == SHL_SCRAM_SHA1 ? 20 : 32;
}

const char *
shl_scram_mech_name(shl_scram_mech_t mech)
{
    return mech == SHL_SCRAM_SHA1 ? "SCRAM-SHA-1" : "SCRAM-SHA-256";
}

bool
shl_scram_mech_parse(const char *name, shl_scram_mech_t *mech)
{
    bool ok = true;
    if (strcmp(name, "SCRAM-SHA-1") == 0) {
        *mech = SHL_SCRAM_SHA1;
    } else if (strcmp(name, "SCRAM-SHA-256") == 0) {
        *mech = SHL_SCRAM_SHA256;
    } else {
        ok = false;
    }
    return ok;
}

/* Base64 of n bytes into out (cap bytes); false when it does not fit. */
static bool
b64_encode(const uint8_t *in, size_t n, char *out, size_t cap)
{
    if (((n + 2) / 3) * 4 + 1 > cap) {
        return false;
    }
    EVP_EncodeBlock((unsigned char *)out, in, (int)n);
    return true;
}

/* Decode base64 'in' (len chars) into out (cap bytes); the decoded length, or -1. */
static int
b64_decode(const char *in, size_t len, uint8_t *out, size_t cap)
{
    uint8_t tmp[(SHL_SCRAM_MAX_MESSAGE / 4) * 3 + 3];
    int n, pad = 0;
    if (len == 0 || len % 4 != 0 || len > SHL_SCRAM_MAX_MESSAGE) {
        return -1;
    }
    pad = (in[len - 1] == '=') + (in[len - 2] == '=');
    if ((len / 4) * 3 - (size_t)pad > cap) {
        return -1;
    }
    n = EVP_DecodeBlock(tmp, (const unsigned char *)in, (int)len);
    if (n < pad) {
        return -1;
    }
    memcpy(out, tmp, (size_t)(n - pad));
    return n - pad;
}

int
shl_scram_password_prepare(shl_scram_mech_t mech, const char *user, const char *password,
                           char **out, shl_status_t *st)
{
    int ret = 0;
    *out = NULL;
    if (mech == SHL_SCRAM_SHA1) {
        /* MongoDB's SCRAM-SHA-1 salts hex(MD5("user:mongo:password")), never the password. */
        uint8_t d[EVP_MAX_MD_SIZE];
        unsigned int dn = 0;
        EVP_MD_CTX *c = EVP_MD_CTX_new();
        char *hex = bson_malloc(33);
        if (c == NULL || !EVP_DigestInit_ex(c, EVP_md5(), NULL) ||
            !EVP_DigestUpdate(c, user, strlen(user)) || !EVP_DigestUpdate(c, ":mongo:", 7) ||
            !EVP_DigestUpdate(c, password, strlen(password)) || !EVP_DigestFinal_ex(c, d, &dn)) {
            bson_free(hex);
            EVP_MD_CTX_free(c);
            SHL_FAIL(st, SHL_CODE_INTERNAL_ERROR, "MD5 digest failed");
        }
        EVP_MD_CTX_free(c);
        for (unsigned int i = 0; i < dn && i < 16; i++) {
            snprintf(hex + 2 * i, 3, "%02x", d[i]);
        }
        *out = hex;
    } else {
        char *prepped = NULL;
        int rc = stringprep_profile(password, &prepped, "SASLprep", STRINGPREP_NO_UNASSIGNED);
        if (rc != STRINGPREP_OK) {
            free(prepped);
            SHL_FAIL(st, SHL_CODE_BAD_VALUE, "Error SASLPrepping input: %s",
                     stringprep_strerror(rc));
        }
        *out = bson_strdup(prepped);
        free(prepped);
    }
done:
    return ret;
}

static bool
hmac(shl_scram_mech_t mech, const uint8_t *key, size_t klen, const void *data, size_t dlen,
     uint8_t *out)
{
    unsigned int n = 0;
    return HMAC(md_of(mech), key, (int)klen, data, dlen, out, &n) != NULL;
}

static bool
digest(shl_scram_mech_t mech, const uint8_t *in, size_t n, uint8_t *out)
{
    unsigned int m = 0;
    return EVP_Digest(in, n, out, &m, md_of(mech), NULL) == 1;
}

/* The salted password, client key and server key of 'pw' with raw salt 'salt'. */
static bool
derive(shl_scram_mech_t mech, const char *pw, const uint8_t *salt, size_t salt_len,
       int32_t iterations, uint8_t *client_key, uint8_t *server_key)
{
    uint8_t salted[SHL_SCRAM_MAX_HASH];
    size_t hl = hash_len(mech);
    bool ok = PKCS5_PBKDF2_HMAC(pw, (int)strlen(pw), salt, (int)salt_len, iterations, md_of(mech),
                                (int)hl, salted) == 1 &&
              hmac(mech, salted, hl, "Client Key", 10, client_key) &&
              hmac(mech, salted, hl, "Server Key", 10, server_key);
    OPENSSL_cleanse(salted, sizeof(salted));
    return ok;
}

int
shl_scram_creds_make(shl_scram_mech_t mech, const char *pw, int32_t iterations,
                     const uint8_t *salt, size_t salt_len, shl_scram_creds_t *out,
                     shl_status_t *st)
{
    int ret = 0;
    uint8_t fresh[SHL_SCRAM_MAX_HASH], ck[SHL_SCRAM_MAX_HASH], sk[SHL_SCRAM_MAX_HASH],
        stored[SHL_SCRAM_MAX_HASH];
    size_t hl = hash_len(mech);

    memset(out, 0, sizeof(*out));
    if (salt == NULL) {
        salt_len = hl - 4;
        if (RAND_bytes(fresh, (int)salt_len) != 1) {
            SHL_FAIL(st, SHL_CODE_INTERNAL_ERROR, "could not make a random salt");
        }
        salt = fresh;
    }
    if (iterations < 1 || !derive(mech, pw, salt, salt_len, iterations, ck, sk) ||
        !digest(mech, ck, hl, stored) ||
        !b64_encode(salt, salt_len, out->salt, sizeof(out->salt)) ||
        !b64_encode(stored, hl, out->stored_key, sizeof(out->stored_key)) ||
        !b64_encode(sk, hl, out->server_key, sizeof(out->server_key))) {
        SHL_FAIL(st, SHL_CODE_INTERNAL_ERROR, "could not derive SCRAM credentials");
    }
    out->iterations = iterations;
done:
    OPENSSL_cleanse(ck, sizeof(ck));
    OPENSSL_cleanse(sk, sizeof(sk));
    return ret;
}

/* The value of attribute 'a' ("a=value") at the start of 'p' up to ',' or end; copied
 * into out; returns the position after it or NULL. */
static const char *
attr(const char *p, const char *end, char a, char *out, size_t n)
{
    const char *v;
    size_t len;

    if (end - p < 2 || p[0] != a || p[1] != '=') {
        return NULL;
    }
    v = p + 2;
    p = memchr(v, ',', (size_t)(end - v));
    if (p == NULL) {
        p = end;
    }
    len = (size_t)(p - v);
    if (len + 1 > n || memchr(v, '\0', len) != NULL) {
        return NULL;
    }
    memcpy(out, v, len);
    out[len] = '\0';
    return p < end ? p + 1 : p;
}

/* RFC 5802's saslname: "=2C" is ',' and "=3D" is '='; any other '=' is malformed. */
static bool
unescape_user(const char *in, char *out, size_t n)
{
    size_t o = 0;
    while (*in != '\0') {
        char c = *in;
        if (c == '=') {
            if (strncmp(in, "=2C", 3) == 0) {
                c = ',';
            } else if (strncmp(in, "=3D", 3) == 0) {
                c = '=';
            } else {
                return false;
            }
            in += 3;
        } else {
            in++;
        }
        if (o + 1 >= n) {
            return false;
        }
        out[o++] = c;
    }
    out[o] = '\0';
    return o > 0;
}

int
shl_scram_server_start(shl_scram_server_t *s, shl_scram_mech_t mech, const char *msg,
                       size_t len, shl_status_t *st)
{
    int ret = 0;
    const char *p = msg, *end = msg + len;
    char raw_user[256], nonce[256];

    memset(s, 0, sizeof(*s));
    s->mech = mech;
    if (len >= SHL_SCRAM_MAX_MESSAGE || len < 3 || memchr(msg, '\0', len) != NULL) {
        SHL_FAIL(st, SHL_CODE_BAD_VALUE, "Invalid SCRAM client first message");
    }
    /* gs2 header: "n,," -- no channel binding and no authorization identity. */
    if (strncmp(p, "n,,", 3) != 0) {
        SHL_FAIL(st, SHL_CODE_BAD_VALUE,
                 "Incorrect SCRAM client first message header: only 'n,,' is supported");
    }
    p += 3;
    memcpy(s->client_first_bare, p, (size_t)(end - p));
    s->client_first_bare[end - p] = '\0';
    if ((p = attr(p, end, 'n', raw_user, sizeof(raw_user))) == NULL ||
        (p = attr(p, end, 'r', nonce, sizeof(nonce))) == NULL || p != end ||
        !unescape_user(raw_user, s->user, sizeof(s->user)) || strlen(nonce) < 8 ||
        strlen(nonce) > 128) {
        SHL_FAIL(st, SHL_CODE_BAD_VALUE, "Invalid SCRAM client first message");
    }
    /* Printable ASCII but ',' (RFC 5802's nonce). */
    for (const char *c = nonce; *c != '\0'; c++) {
        if (*c < 0x21 || *c > 0x7e || *c == ',') {
            SHL_FAIL(st, SHL_CODE_BAD_VALUE, "Invalid SCRAM client nonce");
        }
    }
    snprintf(s->nonce, sizeof(s->nonce), "%s", nonce);
    s->step = 0;
done:
    return ret;
}

int
shl_scram_server_first(shl_scram_server_t *s, const shl_scram_creds_t *creds,
                       const char *server_nonce, char *out, size_t n, shl_status_t *st)
{
    int ret = 0;
    char sn[64];
    uint8_t rnd[24];
    int w;

    if (server_nonce == NULL) {
        if (RAND_bytes(rnd, sizeof(rnd)) != 1) {
            SHL_FAIL(st, SHL_CODE_INTERNAL_ERROR, "could not make a nonce");
        }
        b64_encode(rnd, sizeof(rnd), sn, sizeof(sn));
        server_nonce = sn;
    }
    if (strlen(s->nonce) + strlen(server_nonce) + 1 > sizeof(s->nonce)) {
        SHL_FAIL(st, SHL_CODE_BAD_VALUE, "SCRAM nonce too long");
    }
    strcat(s->nonce, server_nonce);
    s->creds = *creds;
    w = snprintf(s->server_first, sizeof(s->server_first), "r=%s,s=%s,i=%d", s->nonce,
                 creds->salt, creds->iterations);
    if (w < 0 || (size_t)w >= n || (size_t)w >= sizeof(s->server_first)) {
        SHL_FAIL(st, SHL_CODE_BAD_VALUE, "SCRAM server first message too long");
    }
    memcpy(out, s->server_first, (size_t)w + 1);
    s->step = 1;
done:
    return ret;
}

int
shl_scram_server_final(shl_scram_server_t *s, const char *msg, size_t len, char *out, size_t n,
                       shl_status_t *st)
{
    int ret = 0;
    const char *p = msg, *end = msg + len, *proof_at;
    char cb[64], nonce[256], proof_b64[128], auth_msg[3 * SHL_SCRAM_MAX_MESSAGE];
    uint8_t proof[SHL_SCRAM_MAX_HASH + 4], stored[SHL_SCRAM_MAX_HASH], server_key[SHL_SCRAM_MAX_HASH],
        sig[SHL_SCRAM_MAX_HASH], client_key[SHL_SCRAM_MAX_HASH], check[SHL_SCRAM_MAX_HASH],
        server_sig[SHL_SCRAM_MAX_HASH];
    size_t hl = hash_len(s->mech);
    int w;

    if (s->step != 1) {
        SHL_FAIL(st, SHL_CODE_BAD_VALUE, "SCRAM conversation out of order");
    }
    s->step = 2; /* one try per conversation, whatever happens below */
    if (len >= SHL_SCRAM_MAX_MESSAGE || memchr(msg, '\0', len) != NULL ||
        (p = attr(p, end, 'c', cb, sizeof(cb))) == NULL ||
        (p = attr(p, end, 'r', nonce, sizeof(nonce))) == NULL) {
        SHL_FAIL(st, SHL_CODE_BAD_VALUE, "Invalid SCRAM client final message");
    }
    proof_at = p;
    if ((p = attr(p, end, 'p', proof_b64, sizeof(proof_b64))) == NULL || p != end) {
        SHL_FAIL(st, SHL_CODE_BAD_VALUE, "Invalid SCRAM client final message");
    }
    /* "biws" is base64("n,,"): the header client-first sent. */
    if (strcmp(cb, "biws") != 0 || strcmp(nonce, s->nonce) != 0 ||
        b64_decode(proof_b64, strlen(proof_b64), proof, sizeof(proof)) != (int)hl ||
        b64_decode(s->creds.stored_key, strlen(s->creds.stored_key), stored, sizeof(stored)) !=
            (int)hl ||
        b64_decode(s->creds.server_key, strlen(s->creds.server_key), server_key,
                   sizeof(server_key)) != (int)hl) {
        SHL_FAIL(st, SHL_CODE_AUTHENTICATION_FAILED, "Authentication failed.");
    }
    w = snprintf(auth_msg, sizeof(auth_msg), "%s,%s,%.*s", s->client_first_bare, s->server_first,
                 (int)(proof_at - 1 - msg), msg);
    if (w < 0 || (size_t)w >= sizeof(auth_msg) || proof_at == msg) {
        SHL_FAIL(st, SHL_CODE_AUTHENTICATION_FAILED, "Authentication failed.");
    }
    /* ClientKey = proof XOR HMAC(StoredKey, AuthMessage); H(ClientKey) must be StoredKey. */
    if (!hmac(s->mech, stored, hl, auth_msg, (size_t)w, sig)) {
        SHL_FAIL(st, SHL_CODE_INTERNAL_ERROR, "HMAC failed");
    }
    for (size_t i = 0; i < hl; i++) {
        client_key[i] = proof[i] ^ sig[i];
    }
    if (!digest(s->mech, client_key, hl, check) || CRYPTO_memcmp(check, stored, hl) != 0) {
        SHL_FAIL(st, SHL_CODE_AUTHENTICATION_FAILED, "Authentication failed.");
    }
    if (!hmac(s->mech, server_key, hl, auth_msg, (size_t)w, server_sig) || n < 3) {
        SHL_FAIL(st, SHL_CODE_INTERNAL_ERROR, "HMAC failed");
    }
    memcpy(out, "v=", 2);
    if (!b64_encode(server_sig, hl, out + 2, n - 2)) {
        SHL_FAIL(st, SHL_CODE_INTERNAL_ERROR, "SCRAM server final message too long");
    }
done:
    OPENSSL_cleanse(client_key, sizeof(client_key));
    OPENSSL_cleanse(server_key, sizeof(server_key));
    return ret;
}

void
shl_scram_server_clear(shl_scram_server_t *s)
{
    OPENSSL_cleanse(s, sizeof(*s));
}

int
shl_scram_client_proof(shl_scram_mech_t mech, const char *pw, const char *client_first_bare,
                       const char *server_first, const char *final_no_proof, char *proof,
                       size_t proof_n, char *server_sig, size_t sig_n,
                       shl_scram_client_keys_t *keys, shl_status_t *st)
{
    int ret = 0;
    const char *p, *end = server_first + strlen(server_first);
    char nonce[256], salt_b64[128], iter[32], auth_msg[3 * SHL_SCRAM_MAX_MESSAGE];
    uint8_t salt[96], ck[SHL_SCRAM_MAX_HASH], sk[SHL_SCRAM_MAX_HASH], stored[SHL_SCRAM_MAX_HASH],
        sig[SHL_SCRAM_MAX_HASH], ssig[SHL_SCRAM_MAX_HASH];
    size_t hl = hash_len(mech);
    int salt_len, w;

    if ((p = attr(server_first, end, 'r', nonce, sizeof(nonce))) == NULL ||
        (p = attr(p, end, 's', salt_b64, sizeof(salt_b64))) == NULL ||
        (p = attr(p, end, 'i', iter, sizeof(iter))) == NULL ||
        (salt_len = b64_decode(salt_b64, strlen(salt_b64), salt, sizeof(salt))) <= 0 ||
        atoi(iter) < 1) {
        SHL_FAIL(st, SHL_CODE_BAD_VALUE, "Invalid SCRAM server first message");
    }
    w = snprintf(auth_msg, sizeof(auth_msg), "%s,%s,%s", client_first_bare, server_first,
                 final_no_proof);
    if (keys != NULL && keys->iterations == atoi(iter) && strcmp(keys->salt, salt_b64) == 0) {
        memcpy(ck, keys->client_key, hl);
        memcpy(sk, keys->server_key, hl);
    } else if (!derive(mech, pw, salt, (size_t)salt_len, atoi(iter), ck, sk)) {
        SHL_FAIL(st, SHL_CODE_INTERNAL_ERROR, "SCRAM client computation failed");
    } else if (keys != NULL && strlen(salt_b64) < sizeof(keys->salt)) {
        memcpy(keys->salt, salt_b64, strlen(salt_b64) + 1);
        keys->iterations = atoi(iter);
        memcpy(keys->client_key, ck, hl);
        memcpy(keys->server_key, sk, hl);
    }
    if (w < 0 || (size_t)w >= sizeof(auth_msg) ||
        !digest(mech, ck, hl, stored) || !hmac(mech, stored, hl, auth_msg, (size_t)w, sig) ||
        !hmac(mech, sk, hl, auth_msg, (size_t)w, ssig)) {
        SHL_FAIL(st, SHL_CODE_INTERNAL_ERROR, "SCRAM client computation failed");
    }
    for (size_t i = 0; i < hl; i++) {
        ck[i] ^= sig[i];
    }
    if (!b64_encode(ck, hl, proof, proof_n) || !b64_encode(ssig, hl, server_sig, sig_n)) {
        SHL_FAIL(st, SHL_CODE_BAD_VALUE, "SCRAM output buffer too small");
    }
done:
    OPENSSL_cleanse(ck, sizeof(ck));
    OPENSSL_cleanse(sk, sizeof(sk));
    return ret;
}
