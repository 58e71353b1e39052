/*
 * scram.h -- the server side of SCRAM (RFC 5802, RFC 7677) as MongoDB runs it:
 * SCRAM-SHA-1 over MongoDB's password digest and SCRAM-SHA-256 over the SASLprepped
 * password; credentials (salt, storedKey, serverKey, iterationCount) made and checked with
 * OpenSSL. Pure logic: no BSON, no I/O. docs/design/auth.md "SCRAM".
 */
#ifndef SHL_AUTH_SCRAM_H
#define SHL_AUTH_SCRAM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"

typedef enum shl_scram_mech {
    SHL_SCRAM_SHA1,
    SHL_SCRAM_SHA256,
} shl_scram_mech_t;

/* MongoDB's default iteration counts (scramIterationCount, scramSHA256IterationCount). */
#define SHL_SCRAM_SHA1_ITERATIONS 10000
#define SHL_SCRAM_SHA256_ITERATIONS 15000
#define SHL_SCRAM_MAX_HASH 32
#define SHL_SCRAM_B64_MAX 64 /* base64 of a salt or key, NUL included */
/* A SCRAM message longer than this is refused (no real client sends more than ~300 bytes). */
#define SHL_SCRAM_MAX_MESSAGE 4096

/* One mechanism's stored credentials, as admin.system.users keeps them (base64 strings). */
typedef struct shl_scram_creds {
    int32_t iterations;
    char salt[SHL_SCRAM_B64_MAX];
    char stored_key[SHL_SCRAM_B64_MAX];
    char server_key[SHL_SCRAM_B64_MAX];
} shl_scram_creds_t;

/* shl_scram_mech_name -- "SCRAM-SHA-1" / "SCRAM-SHA-256". */
const char *shl_scram_mech_name(shl_scram_mech_t mech);

/* shl_scram_mech_parse -- the mechanism named 'name'; false for any other name. */
bool shl_scram_mech_parse(const char *name, shl_scram_mech_t *mech);

/*
 * shl_scram_password_prepare --
 *     The string a mechanism salts for 'user' and cleartext 'password' (malloc'd into *out,
 *     free with bson_free): SCRAM-SHA-1 hashes MongoDB's digest, hex(MD5(user ":mongo:"
 *     password)); SCRAM-SHA-256 the SASLprepped password (RFC 4013, libidn's stringprep).
 *     Errors: BadValue for a password SASLprep refuses (prohibited or unassigned code points).
 */
int shl_scram_password_prepare(shl_scram_mech_t mech, const char *user, const char *password,
                               char **out, shl_status_t *st);

/*
 * shl_scram_creds_make --
 *     Credentials for the prepared password 'pw': a fresh random salt (hash length - 4
 *     bytes, as MongoDB) unless 'salt' is given (tests), PBKDF2 over 'iterations', then
 *     storedKey = H(HMAC(salted, "Client Key")), serverKey = HMAC(salted, "Server Key").
 *     Errors: InternalError when OpenSSL fails.
 */
int shl_scram_creds_make(shl_scram_mech_t mech, const char *pw, int32_t iterations,
                         const uint8_t *salt, size_t salt_len, shl_scram_creds_t *out,
                         shl_status_t *st);

/* The server's side of one conversation; zero it, then drive it with the calls below. */
typedef struct shl_scram_server {
    shl_scram_mech_t mech;
    int step;                /* 0: nothing yet, 1: server-first sent, 2: done */
    char user[256];          /* the user named in client-first, unescaped */
    char client_first_bare[SHL_SCRAM_MAX_MESSAGE];
    char server_first[SHL_SCRAM_MAX_MESSAGE];
    char nonce[256];         /* client nonce + server nonce */
    shl_scram_creds_t creds; /* the user's credentials for 'mech' */
} shl_scram_server_t;

/*
 * shl_scram_server_start --
 *     Parse client-first 'msg' ("n,,n=user,r=nonce"): on success s->user holds the user to
 *     look up. Channel binding ("p="), an authzid other than none and extensions are refused.
 *     Errors: BadValue for a malformed message (no secret and no user existence revealed).
 */
int shl_scram_server_start(shl_scram_server_t *s, shl_scram_mech_t mech, const char *msg,
                           size_t len, shl_status_t *st);

/*
 * shl_scram_server_first --
 *     With the user's credentials 'creds', build server-first ("r=..,s=..,i=..") into 'out'
 *     (n bytes). 'server_nonce' is for tests; NULL makes 24 random bytes, base64.
 */
int shl_scram_server_first(shl_scram_server_t *s, const shl_scram_creds_t *creds,
                           const char *server_nonce, char *out, size_t n, shl_status_t *st);

/*
 * shl_scram_server_final --
 *     Check client-final 'msg' ("c=biws,r=..,p=proof") against the conversation: nonce,
 *     channel binding and proof (compared in constant time). On success 'out' holds
 *     server-final ("v=signature") and the conversation is done.
 *     Errors: AuthenticationFailed (the same for every reason), BadValue for a malformed one.
 */
int shl_scram_server_final(shl_scram_server_t *s, const char *msg, size_t len, char *out,
                           size_t n, shl_status_t *st);

/* shl_scram_server_clear -- wipe the conversation's secrets. */
void shl_scram_server_clear(shl_scram_server_t *s);

/* A client's keys for one (salt, iterations): what PBKDF2 made, kept to skip it next time. */
typedef struct shl_scram_client_keys {
    char salt[SHL_SCRAM_B64_MAX]; /* "" when empty */
    int32_t iterations;
    uint8_t client_key[SHL_SCRAM_MAX_HASH];
    uint8_t server_key[SHL_SCRAM_MAX_HASH];
} shl_scram_client_keys_t;

/*
 * shl_scram_client_proof --
 *     The client's side, for tests and the internal client: from the prepared password,
 *     client-first-bare, server-first and client-final-without-proof, the base64 proof
 *     into 'proof' and the expected server signature into 'server_sig'. 'keys' (may be
 *     NULL) is used when its salt and iterations are server-first's, and refilled when not.
 */
int shl_scram_client_proof(shl_scram_mech_t mech, const char *pw, const char *client_first_bare,
                           const char *server_first, const char *final_no_proof, char *proof,
                           size_t proof_n, char *server_sig, size_t sig_n,
                           shl_scram_client_keys_t *keys, shl_status_t *st);

#endif
