/*
 * utf8.h -- UTF-8 checks for text Shale writes. Names and strings received over the
 * wire need not be UTF-8 (MongoDB's default validation is structural only; see
 * docs/design/utf8.md), so text built from them (error messages, log lines) is made
 * valid here before a driver or a JSON reader sees it.
 */
#ifndef SHL_BASE_UTF8_H
#define SHL_BASE_UTF8_H

#include <stdbool.h>
#include <stddef.h>

/*
 * shl_utf8_seq_len --
 *     The length (1-4) of the valid UTF-8 sequence that starts s[0] (at most 'n' > 0
 *     bytes available), or 0 if none does: a stray continuation byte, a truncated
 *     sequence, an overlong form, a surrogate or a value past U+10FFFF.
 */
size_t shl_utf8_seq_len(const unsigned char *s, size_t n);

/*
 * shl_utf8_copy_valid --
 *     Copy 'n' bytes of 'src' into dst[cap] (cap > 0) as valid UTF-8: each byte that
 *     starts no valid sequence becomes U+FFFD; output stops before a sequence that would
 *     not fit, so it is never cut inside a character. Always NUL-terminated; returns
 *     the length written. 'src' and 'dst' must not overlap.
 */
size_t shl_utf8_copy_valid(char *dst, size_t cap, const char *src, size_t n);

/* shl_utf8_is_valid -- whether all 'n' bytes of 's' are valid UTF-8 (NUL allowed). */
bool shl_utf8_is_valid(const char *s, size_t n);

#endif /* SHL_BASE_UTF8_H */
