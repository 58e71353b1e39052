/*
 * utf8.c -- UTF-8 validation and repair (see utf8.h). The rules are RFC 3629's, which
 * MongoDB's full BSON validation and the drivers' decoders apply.
 */
#include "base/utf8.h"

#include <stdint.h>
#include <string.h>

size_t
shl_utf8_seq_len(const unsigned char *s, size_t n)
{
    size_t need;
    uint32_t cp;

    if (s[0] < 0x80) {
        return 1;
    } else if ((s[0] & 0xE0) == 0xC0) {
        need = 2;
        cp = s[0] & 0x1F;
    } else if ((s[0] & 0xF0) == 0xE0) {
        need = 3;
        cp = s[0] & 0x0F;
    } else if ((s[0] & 0xF8) == 0xF0) {
        need = 4;
        cp = s[0] & 0x07;
    } else {
        return 0;
    }
    if (need > n) {
        return 0;
    }
    for (size_t i = 1; i < need; i++) {
        if ((s[i] & 0xC0) != 0x80) {
            return 0;
        }
        cp = (cp << 6) | (s[i] & 0x3F);
    }
    /* Overlong forms, surrogates and values past U+10FFFF are not UTF-8. */
    if ((need == 2 && cp < 0x80) || (need == 3 && cp < 0x800) || (need == 4 && cp < 0x10000) ||
        cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
        return 0;
    }
    return need;
}

size_t
shl_utf8_copy_valid(char *dst, size_t cap, const char *src, size_t n)
{
    static const char replacement[] = "\xEF\xBF\xBD"; /* U+FFFD */
    const unsigned char *s = (const unsigned char *)src;
    size_t in = 0, out = 0;

    while (in < n) {
        size_t seq = shl_utf8_seq_len(s + in, n - in);
        const char *from = seq > 0 ? src + in : replacement;
        size_t len = seq > 0 ? seq : 3;

        if (out + len > cap - 1) {
            break;
        }
        memcpy(dst + out, from, len);
        out += len;
        in += seq > 0 ? seq : 1;
    }
    dst[out] = '\0';
    return out;
}

bool
shl_utf8_is_valid(const char *s, size_t n)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0;

    while (i < n) {
        size_t seq = p[i] < 0x80 ? 1 : shl_utf8_seq_len(p + i, n - i);
        if (seq == 0) {
            return false;
        }
        i += seq;
    }
    return true;
}
