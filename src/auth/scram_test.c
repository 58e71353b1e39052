/*
 * scram_test.c -- the SCRAM server against RFC 5802's and RFC 7677's example exchanges,
 * MongoDB's SCRAM-SHA-1 password digest, and conversations that must fail.
 */
#include "auth/scram.h"

#include <openssl/evp.h>

#include "base/unit_test.h"

/* Run one RFC exchange: the server must send 'sfirst' and accept 'cfinal' with 'sfinal'. */
static void
rfc_exchange(shl_scram_mech_t mech, const char *cfirst, const char *salt_b64, const char *snonce,
             const char *sfirst, const char *cfinal, const char *sfinal)
{
    shl_status_t st = SHL_STATUS_INIT;
    shl_scram_server_t s;
    shl_scram_creds_t creds;
    uint8_t salt[64];
    char out[512];
    int n = EVP_DecodeBlock(salt, (const unsigned char *)salt_b64, (int)strlen(salt_b64));
    n -= (salt_b64[strlen(salt_b64) - 1] == '=') + (salt_b64[strlen(salt_b64) - 2] == '=');

    ASSERT_INT_EQ(shl_scram_creds_make(mech, "pencil", 4096, salt, (size_t)n, &creds, &st), 0);
    ASSERT_STR_EQ(creds.salt, salt_b64);
    ASSERT_INT_EQ(shl_scram_server_start(&s, mech, cfirst, strlen(cfirst), &st), 0);
    ASSERT_STR_EQ(s.user, "user");
    ASSERT_INT_EQ(shl_scram_server_first(&s, &creds, snonce, out, sizeof(out), &st), 0);
    ASSERT_STR_EQ(out, sfirst);
    ASSERT_INT_EQ(shl_scram_server_final(&s, cfinal, strlen(cfinal), out, sizeof(out), &st), 0);
    ASSERT_STR_EQ(out, sfinal);
}

SHL_TEST(scram_sha1_rfc5802)
{
    rfc_exchange(SHL_SCRAM_SHA1, "n,,n=user,r=fyko+d2lbbFgONRv9qkxdawL", "QSXCR+Q6sek8bf92",
                 "3rfcNHYJY1ZVvWVs7j",
                 "r=fyko+d2lbbFgONRv9qkxdawL3rfcNHYJY1ZVvWVs7j,s=QSXCR+Q6sek8bf92,i=4096",
                 "c=biws,r=fyko+d2lbbFgONRv9qkxdawL3rfcNHYJY1ZVvWVs7j,p=v0X8v3Bz2T0CJGbJQyF0X+HI4Ts=",
                 "v=rmF9pqV8S7suAoZWja4dJRkFsKQ=");
}

SHL_TEST(scram_sha256_rfc7677)
{
    rfc_exchange(
        SHL_SCRAM_SHA256, "n,,n=user,r=rOprNGfwEbeRWgbNEkqO", "W22ZaJ0SNY7soEsUEjb6gQ==",
        "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0",
        "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096",
        "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjf"
        "MHgsqmmiz7AndVQ=",
        "v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=");
}

SHL_TEST(scram_wrong_proof_fails_once)
{
    shl_status_t st = SHL_STATUS_INIT;
    shl_scram_server_t s;
    shl_scram_creds_t creds;
    char out[512];
    const char *cf = "n,,n=user,r=fyko+d2lbbFgONRv9qkxdawL";
    const char *bad =
        "c=biws,r=fyko+d2lbbFgONRv9qkxdawL3rfcNHYJY1ZVvWVs7j,p=v0X8v3Bz2T0CJGbJQyF0X+HI4Tt=";

    ASSERT_INT_EQ(shl_scram_creds_make(SHL_SCRAM_SHA1, "pencil", 4096,
                                       (const uint8_t *)"0123456789abcdef", 16, &creds, &st),
                  0);
    ASSERT_INT_EQ(shl_scram_server_start(&s, SHL_SCRAM_SHA1, cf, strlen(cf), &st), 0);
    ASSERT_INT_EQ(shl_scram_server_first(&s, &creds, "3rfcNHYJY1ZVvWVs7j", out, sizeof(out), &st),
                  0);
    ASSERT_INT_EQ(shl_scram_server_final(&s, bad, strlen(bad), out, sizeof(out), &st),
                  SHL_CODE_AUTHENTICATION_FAILED);
    ASSERT_STR_EQ(st.reason, "Authentication failed.");
    /* A replay on the same conversation is refused too. */
    ASSERT(shl_scram_server_final(&s, bad, strlen(bad), out, sizeof(out), &st) != 0);
}

SHL_TEST(scram_malformed_first)
{
    shl_status_t st = SHL_STATUS_INIT;
    shl_scram_server_t s;
    static const char *const bad[] = {"", "y,,n=u,r=abcdefgh", "p=tls-unique,,n=u,r=abcdefgh",
                                      "n,a=x,n=u,r=abcdefgh", "n,,n=u", "n,,n=,r=abcdefgh",
                                      "n,,n=a=b,r=abcdefgh", "n,,r=abcdefgh,n=u",
                                      "n,,n=u,r=abc,d"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        ASSERT(shl_scram_server_start(&s, SHL_SCRAM_SHA256, bad[i], strlen(bad[i]), &st) != 0);
    }
    ASSERT_INT_EQ(shl_scram_server_start(&s, SHL_SCRAM_SHA256, "n,,n=a=2Cb=3Dc,r=abcdefgh",
                                         strlen("n,,n=a=2Cb=3Dc,r=abcdefgh"), &st),
                  0);
    ASSERT_STR_EQ(s.user, "a,b=c");
}

SHL_TEST(scram_password_prepare)
{
    shl_status_t st = SHL_STATUS_INIT;
    char *out = NULL;

    /* MongoDB's SHA-1 digest: hex(md5("user:mongo:pencil")). */
    ASSERT_INT_EQ(shl_scram_password_prepare(SHL_SCRAM_SHA1, "user", "pencil", &out, &st), 0);
    ASSERT_INT_EQ(strlen(out), 32);
    bson_free(out);
    /* SASLprep maps a non-ASCII space to a space and drops a soft hyphen (RFC 4013). */
    ASSERT_INT_EQ(
        shl_scram_password_prepare(SHL_SCRAM_SHA256, "u", "I\xc2\xad" "X\xc2\xa0y", &out, &st), 0);
    ASSERT_STR_EQ(out, "IX y");
    bson_free(out);
    /* A control character is prohibited. */
    ASSERT(shl_scram_password_prepare(SHL_SCRAM_SHA256, "u", "a\x07", &out, &st) != 0);
}
