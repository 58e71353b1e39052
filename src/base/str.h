/*
 * str.h -- small string helpers for hot paths.
 */
#ifndef SHL_BASE_STR_H
#define SHL_BASE_STR_H

#include <string.h>

/*
 * shl_str_copy --
 *     Copy the C string 'src' into dst[cap] (cap > 0), truncated to cap - 1 bytes and
 *     always NUL-terminated; what snprintf(dst, cap, "%s", src) does, without the
 *     format machinery (hundreds of instructions per call on a per-request path).
 */
static inline void
shl_str_copy(char *dst, size_t cap, const char *src)
{
    size_t n = strnlen(src, cap - 1);
    memcpy(dst, src, n);
    dst[n] = '\0';
}

#endif /* SHL_BASE_STR_H */
