/*
 * fuzz_scram.c -- libFuzzer target for the SCRAM server conversation (src/auth/scram.c),
 * what an unauthenticated client controls: the first byte picks the mechanism, the rest is
 * client-first and client-final separated by a NUL. Any input must fail cleanly or run the
 * conversation; a client-first the server accepts must then accept the right proof (made by
 * the client side) and refuse the fuzzed final unless it is that same message.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "auth/scram.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static shl_scram_creds_t creds[2];
static bool ready;

static void
setup(void)
{
    shl_status_t st = SHL_STATUS_INIT;
    /* Few iterations: the fuzzer explores parsing, not PBKDF2. */
    if (shl_scram_creds_make(SHL_SCRAM_SHA1, "pencil", 2, (const uint8_t *)"saltsaltsaltsalt", 16,
                             &creds[SHL_SCRAM_SHA1], &st) != 0 ||
        shl_scram_creds_make(SHL_SCRAM_SHA256, "pencil", 2,
                             (const uint8_t *)"saltsaltsaltsaltsaltsaltsalt", 28,
                             &creds[SHL_SCRAM_SHA256], &st) != 0) {
        abort();
    }
    ready = true;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    shl_scram_server_t s, good;
    shl_status_t st = SHL_STATUS_INIT;
    shl_scram_mech_t mech;
    const char *first, *final;
    size_t first_len, final_len;
    const uint8_t *nul;
    char out[SHL_SCRAM_MAX_MESSAGE], fin[SHL_SCRAM_MAX_MESSAGE], proof[SHL_SCRAM_B64_MAX],
        sig[SHL_SCRAM_B64_MAX], want[SHL_SCRAM_MAX_MESSAGE + 128];
    int fin_rc;

    if (!ready) {
        setup();
    }
    if (size < 1) {
        return 0;
    }
    mech = (data[0] & 1) ? SHL_SCRAM_SHA256 : SHL_SCRAM_SHA1;
    data++;
    size--;
    nul = memchr(data, 0, size);
    first = (const char *)data;
    first_len = nul != NULL ? (size_t)(nul - data) : size;
    final = nul != NULL ? (const char *)nul + 1 : "";
    final_len = nul != NULL ? size - first_len - 1 : 0;

    if (shl_scram_server_start(&s, mech, first, first_len, &st) != 0) {
        return 0;
    }
    if (shl_scram_server_first(&s, &creds[mech], "SERVERNONCE", out, sizeof(out), &st) != 0) {
        return 0;
    }
    good = s;
    /* The fuzzed final: must not crash; may succeed only if it carries the right proof. */
    fin_rc = shl_scram_server_final(&s, final, final_len, fin, sizeof(fin), &st);
    /* The right final for this conversation must succeed. */
    snprintf(want, sizeof(want), "c=biws,r=%s", good.nonce);
    if (shl_scram_client_proof(mech, "pencil", good.client_first_bare, good.server_first, want,
                               proof, sizeof(proof), sig, sizeof(sig), NULL, &st) != 0) {
        abort();
    }
    strcat(want, ",p=");
    strcat(want, proof);
    if (shl_scram_server_final(&good, want, strlen(want), fin, sizeof(fin), &st) != 0 ||
        strncmp(fin, "v=", 2) != 0 || strcmp(fin + 2, sig) != 0) {
        fprintf(stderr, "fuzz_scram: the right proof was refused: %s\n", st.reason);
        abort();
    }
    if (fin_rc == 0 && (final_len != strlen(want) || memcmp(final, want, final_len) != 0)) {
        fprintf(stderr, "fuzz_scram: a wrong client-final was accepted\n");
        abort();
    }
    return 0;
}
