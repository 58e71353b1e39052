/*
 * md5.c -- see md5.h. RFC 1321, written from the specification.
 */
#include "bson/md5.h"

#include <string.h>

static const uint32_t K[64] = {
    0xd76aa478, 0xe8c7b756, 0x242070db, 0xc1bdceee, 0xf57c0faf, 0x4787c62a, 0xa8304613, 0xfd469501,
    0x698098d8, 0x8b44f7af, 0xffff5bb1, 0x895cd7be, 0x6b901122, 0xfd987193, 0xa679438e, 0x49b40821,
    0xf61e2562, 0xc040b340, 0x265e5a51, 0xe9b6c7aa, 0xd62f105d, 0x02441453, 0xd8a1e681, 0xe7d3fbc8,
    0x21e1cde6, 0xc33707d6, 0xf4d50d87, 0x455a14ed, 0xa9e3e905, 0xfcefa3f8, 0x676f02d9, 0x8d2a4c8a,
    0xfffa3942, 0x8771f681, 0x6d9d6122, 0xfde5380c, 0xa4beea44, 0x4bdecfa9, 0xf6bb4b60, 0xbebfbc70,
    0x289b7ec6, 0xeaa127fa, 0xd4ef3085, 0x04881d05, 0xd9d4d039, 0xe6db99e5, 0x1fa27cf8, 0xc4ac5665,
    0xf4292244, 0x432aff97, 0xab9423a7, 0xfc93a039, 0x655b59c3, 0x8f0ccc92, 0xffeff47d, 0x85845dd1,
    0x6fa87e4f, 0xfe2ce6e0, 0xa3014314, 0x4e0811a1, 0xf7537e82, 0xbd3af235, 0x2ad7d2bb, 0xeb86d391};

static const uint8_t R[64] = {7, 12, 17, 22, 7, 12, 17, 22, 7, 12, 17, 22, 7, 12, 17, 22,
                              5, 9,  14, 20, 5, 9,  14, 20, 5, 9,  14, 20, 5, 9,  14, 20,
                              4, 11, 16, 23, 4, 11, 16, 23, 4, 11, 16, 23, 4, 11, 16, 23,
                              6, 10, 15, 21, 6, 10, 15, 21, 6, 10, 15, 21, 6, 10, 15, 21};

static inline uint32_t
rotl(uint32_t x, unsigned c)
{
    return (x << c) | (x >> (32 - c));
}

/* The four round functions, each in the form with the fewest operations. */
#define F(x, y, z) ((z) ^ ((x) & ((y) ^ (z))))
#define G(x, y, z) ((y) ^ ((z) & ((x) ^ (y))))
#define H(x, y, z) ((x) ^ (y) ^ (z))
#define I(x, y, z) ((y) ^ ((x) | ~(z)))
/* Round i: a = b + ((a + f(b, c, d) + w + K[i]) <<< R[i]); the caller rotates the names. */
#define STEP(f, a, b, c, d, x, i) ((a) = (b) + rotl((a) + f((b), (c), (d)) + (x) + K[i], R[i]))

/* One 64-byte block, unrolled: about a third of the instructions of the looped form. */
static void
block(shl_md5_t *m, const uint8_t *p)
{
    uint32_t w[16], a = m->state[0], b = m->state[1], c = m->state[2], d = m->state[3];

    for (int i = 0; i < 16; i++) {
        w[i] = (uint32_t)p[i * 4] | (uint32_t)p[i * 4 + 1] << 8 | (uint32_t)p[i * 4 + 2] << 16 |
               (uint32_t)p[i * 4 + 3] << 24;
    }
    STEP(F, a, b, c, d, w[0], 0);
    STEP(F, d, a, b, c, w[1], 1);
    STEP(F, c, d, a, b, w[2], 2);
    STEP(F, b, c, d, a, w[3], 3);
    STEP(F, a, b, c, d, w[4], 4);
    STEP(F, d, a, b, c, w[5], 5);
    STEP(F, c, d, a, b, w[6], 6);
    STEP(F, b, c, d, a, w[7], 7);
    STEP(F, a, b, c, d, w[8], 8);
    STEP(F, d, a, b, c, w[9], 9);
    STEP(F, c, d, a, b, w[10], 10);
    STEP(F, b, c, d, a, w[11], 11);
    STEP(F, a, b, c, d, w[12], 12);
    STEP(F, d, a, b, c, w[13], 13);
    STEP(F, c, d, a, b, w[14], 14);
    STEP(F, b, c, d, a, w[15], 15);
    STEP(G, a, b, c, d, w[1], 16);
    STEP(G, d, a, b, c, w[6], 17);
    STEP(G, c, d, a, b, w[11], 18);
    STEP(G, b, c, d, a, w[0], 19);
    STEP(G, a, b, c, d, w[5], 20);
    STEP(G, d, a, b, c, w[10], 21);
    STEP(G, c, d, a, b, w[15], 22);
    STEP(G, b, c, d, a, w[4], 23);
    STEP(G, a, b, c, d, w[9], 24);
    STEP(G, d, a, b, c, w[14], 25);
    STEP(G, c, d, a, b, w[3], 26);
    STEP(G, b, c, d, a, w[8], 27);
    STEP(G, a, b, c, d, w[13], 28);
    STEP(G, d, a, b, c, w[2], 29);
    STEP(G, c, d, a, b, w[7], 30);
    STEP(G, b, c, d, a, w[12], 31);
    STEP(H, a, b, c, d, w[5], 32);
    STEP(H, d, a, b, c, w[8], 33);
    STEP(H, c, d, a, b, w[11], 34);
    STEP(H, b, c, d, a, w[14], 35);
    STEP(H, a, b, c, d, w[1], 36);
    STEP(H, d, a, b, c, w[4], 37);
    STEP(H, c, d, a, b, w[7], 38);
    STEP(H, b, c, d, a, w[10], 39);
    STEP(H, a, b, c, d, w[13], 40);
    STEP(H, d, a, b, c, w[0], 41);
    STEP(H, c, d, a, b, w[3], 42);
    STEP(H, b, c, d, a, w[6], 43);
    STEP(H, a, b, c, d, w[9], 44);
    STEP(H, d, a, b, c, w[12], 45);
    STEP(H, c, d, a, b, w[15], 46);
    STEP(H, b, c, d, a, w[2], 47);
    STEP(I, a, b, c, d, w[0], 48);
    STEP(I, d, a, b, c, w[7], 49);
    STEP(I, c, d, a, b, w[14], 50);
    STEP(I, b, c, d, a, w[5], 51);
    STEP(I, a, b, c, d, w[12], 52);
    STEP(I, d, a, b, c, w[3], 53);
    STEP(I, c, d, a, b, w[10], 54);
    STEP(I, b, c, d, a, w[1], 55);
    STEP(I, a, b, c, d, w[8], 56);
    STEP(I, d, a, b, c, w[15], 57);
    STEP(I, c, d, a, b, w[6], 58);
    STEP(I, b, c, d, a, w[13], 59);
    STEP(I, a, b, c, d, w[4], 60);
    STEP(I, d, a, b, c, w[11], 61);
    STEP(I, c, d, a, b, w[2], 62);
    STEP(I, b, c, d, a, w[9], 63);
    m->state[0] += a;
    m->state[1] += b;
    m->state[2] += c;
    m->state[3] += d;
}

#undef STEP
#undef F
#undef G
#undef H
#undef I

void
shl_md5_init(shl_md5_t *m)
{
    m->state[0] = 0x67452301;
    m->state[1] = 0xefcdab89;
    m->state[2] = 0x98badcfe;
    m->state[3] = 0x10325476;
    m->nbytes = 0;
    m->nbuf = 0;
}

void
shl_md5_update(shl_md5_t *m, const void *data, size_t n)
{
    const uint8_t *p = data;

    m->nbytes += n;
    if (m->nbuf > 0) {
        size_t take = 64 - m->nbuf < n ? 64 - m->nbuf : n;
        memcpy(m->buf + m->nbuf, p, take);
        m->nbuf += take;
        p += take;
        n -= take;
        if (m->nbuf == 64) {
            block(m, m->buf);
            m->nbuf = 0;
        }
    }
    while (n >= 64) {
        block(m, p);
        p += 64;
        n -= 64;
    }
    if (n > 0) {
        memcpy(m->buf, p, n);
        m->nbuf = n;
    }
}

void
shl_md5_final(shl_md5_t *m, uint8_t digest[16])
{
    uint64_t bits = m->nbytes * 8;
    uint8_t pad[72] = {0x80};
    size_t padlen = m->nbuf < 56 ? 56 - m->nbuf : 120 - m->nbuf;
    uint8_t len[8];

    for (int i = 0; i < 8; i++) {
        len[i] = (uint8_t)(bits >> (8 * i));
    }
    shl_md5_update(m, pad, padlen);
    shl_md5_update(m, len, 8);
    for (int i = 0; i < 4; i++) {
        digest[i * 4] = (uint8_t)m->state[i];
        digest[i * 4 + 1] = (uint8_t)(m->state[i] >> 8);
        digest[i * 4 + 2] = (uint8_t)(m->state[i] >> 16);
        digest[i * 4 + 3] = (uint8_t)(m->state[i] >> 24);
    }
}
