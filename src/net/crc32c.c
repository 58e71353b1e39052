/*
 * crc32c.c -- CRC-32C (Castagnoli, reflected polynomial 0x82F63B78) for OP_MSG
 * checksums. Uses the SSE4.2 instruction when the CPU has it, a table otherwise.
 */
#include "net/message.h"

#include <pthread.h>
#include <string.h>

static uint32_t table[256];
static pthread_once_t table_once = PTHREAD_ONCE_INIT;
static int have_sse42;

static void
init_table(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) {
            c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        }
        table[i] = c;
    }
#if defined(__x86_64__)
    __builtin_cpu_init();
    have_sse42 = __builtin_cpu_supports("sse4.2");
#endif
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) static uint32_t
crc_hw(uint32_t crc, const uint8_t *buf, size_t len)
{
    uint64_t c = crc;
    while (len >= 8) {
        uint64_t v;
        memcpy(&v, buf, 8);
        c = __builtin_ia32_crc32di(c, v);
        buf += 8;
        len -= 8;
    }
    crc = (uint32_t)c;
    while (len > 0) {
        crc = __builtin_ia32_crc32qi(crc, *buf++);
        len--;
    }
    return crc;
}
#endif

uint32_t
shl_crc32c(const uint8_t *buf, size_t len)
{
    uint32_t crc = 0xFFFFFFFFu;

    pthread_once(&table_once, init_table);
#if defined(__x86_64__)
    if (have_sse42) {
        return crc_hw(crc, buf, len) ^ 0xFFFFFFFFu;
    }
#endif
    for (size_t i = 0; i < len; i++) {
        crc = table[(crc ^ buf[i]) & 0xFF] ^ (crc >> 8);
    }
    return crc ^ 0xFFFFFFFFu;
}
