/* server/srv_util.h: small helpers shared by the HTTP server files:
 * constant-time string comparison (API keys), UTF-8 sanitizing for text that
 * goes into JSON, Python-style whitespace strip. (The growable byte buffer
 * they all use is common/buf.h.)
 */
#ifndef INFERD_SERVER_SRV_UTIL_H
#define INFERD_SERVER_SRV_UTIL_H

#include <stdbool.h>
#include <stddef.h>

/* Compare a secret of length `secret_len` with `given` (any length) in time
 * that depends only on secret_len, not on where the strings differ. */
bool srv_ct_equal(const char *given, size_t given_len, const char *secret, size_t secret_len);

/* Copy of s[0..n) where every byte that is not part of valid UTF-8 is replaced
 * by U+FFFD, and NUL bytes by U+FFFD too (heap, NUL-terminated). */
char *srv_utf8_sanitize(const char *s, size_t n);

/* True when s[0..n) is empty or only ASCII whitespace. */
bool srv_is_blank(const char *s, size_t n);

/* Python str.strip() over ASCII whitespace: the stripped view is s + *start,
 * *len bytes. */
void srv_strip(const char *s, size_t n, size_t *start, size_t *len);

#endif
