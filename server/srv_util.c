/* server/srv_util.c: see srv_util.h.
 *
 * The constant-time comparison walks the whole secret regardless of the
 * input, folding every difference (and a length mismatch) into one
 * accumulator, so response timing does not reveal a matching prefix.
 *
 * The UTF-8 and whitespace helpers are shared by the parsers and response
 * builders; all are pure functions, safe on any thread.
 */
#include "server/srv_util.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "common/buf.h"
#include "common/util.h"

/* NOTE: the loop runs secret_len times whatever the input, so timing can
 * reveal the secret's length but nothing of its content. volatile keeps
 * the compiler from turning the accumulation into an early exit. */
bool srv_ct_equal(const char *given, size_t given_len, const char *secret, size_t secret_len)
{
    volatile unsigned char diff = (unsigned char)(given_len != secret_len);
    for (size_t i = 0; i < secret_len; i++) {
        unsigned char g = i < given_len ? (unsigned char)given[i] : 0;
        diff |= (unsigned char)(g ^ (unsigned char)secret[i]);
    }
    return diff == 0;
}

/* Length of the valid UTF-8 sequence at s (n bytes left), 0 when invalid. */
static size_t utf8_seq_len(const unsigned char *s, size_t n)
{
    unsigned char c = s[0];
    size_t len;
    if (c < 0x80)
        /* NUL counts as invalid: the result is a C string, and a NUL
         * would cut it (and the JSON built from it) short. */
        return c == 0 ? 0 : 1;
    if (c >= 0xc2 && c <= 0xdf)
        len = 2;
    else if (c >= 0xe0 && c <= 0xef)
        len = 3;
    else if (c >= 0xf0 && c <= 0xf4)
        len = 4;
    else
        return 0;
    if (len > n)
        return 0;
    /* The lead byte gives the length; util_utf8_valid then rejects bad
     * continuation bytes, overlongs and surrogates. */
    return util_utf8_valid((const char *)s, len) ? len : 0;
}

/* Each invalid byte becomes one U+FFFD and decoding resumes at the next
 * byte (the "maximal subpart" replacement is not attempted: one per byte
 * is simpler and still valid). Heap result, NUL-terminated. */
char *srv_utf8_sanitize(const char *s, size_t n)
{
    inferd_buf b = INFERD_BUF_INIT;
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        size_t k = utf8_seq_len(p + i, n - i);
        if (k == 0) {
            inferd_buf_append(&b, "\xef\xbf\xbd", 3);
            i++;
        } else {
            inferd_buf_append(&b, p + i, k);
            i += k;
        }
    }
    return inferd_buf_steal(&b, NULL);
}

/* ASCII whitespace as C's isspace in the "C" locale, without the locale. */
static bool is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

bool srv_is_blank(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!is_space(s[i]))
            return false;
    return true;
}

void srv_strip(const char *s, size_t n, size_t *start, size_t *len)
{
    size_t a = 0, b = n;
    while (a < b && is_space(s[a]))
        a++;
    while (b > a && is_space(s[b - 1]))
        b--;
    *start = a;
    *len = b - a;
}
