/*
 * md5.h -- MD5 (RFC 1321), used only by the hashed-index hash (bson_hash.h), which MongoDB
 * defines over MD5. Our own small implementation: OpenSSL 3's EVP interface fetches the
 * algorithm under a global rwlock on every digest, which dominated $group and hashed-key
 * routing profiles. Plain data, no allocation, thread-safe per context.
 */
#ifndef SHL_BSON_MD5_H
#define SHL_BSON_MD5_H

#include <stddef.h>
#include <stdint.h>

typedef struct shl_md5 {
    uint32_t state[4];
    uint64_t nbytes;
    uint8_t buf[64];
    size_t nbuf;
} shl_md5_t;

void shl_md5_init(shl_md5_t *m);
void shl_md5_update(shl_md5_t *m, const void *data, size_t n);
void shl_md5_final(shl_md5_t *m, uint8_t digest[16]);

#endif
