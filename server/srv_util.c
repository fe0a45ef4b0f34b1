/* server/srv_util.c: see srv_util.h.
 *
 * The constant-time comparison walks the whole secret regardless of the
 * input, folding every difference (and a length mismatch) into one
 * accumulator, so response timing does not reveal a matching prefix.
 */
#include "server/srv_util.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "common/alloc.h"
#include "common/util.h"

static void buf_reserve(srv_buf *b, size_t extra)
{
    size_t need = b->len + extra + 1;
    if (need <= b->cap)
        return;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < need)
        cap *= 2;
    b->data = inferd_realloc(b->data, cap);
    b->cap = cap;
}

void srv_buf_append(srv_buf *b, const void *data, size_t n)
{
    buf_reserve(b, n);
    if (n)
        memcpy(b->data + b->len, data, n);
    b->len += n;
    b->data[b->len] = '\0';
}

void srv_buf_puts(srv_buf *b, const char *s)
{
    srv_buf_append(b, s, strlen(s));
}

void srv_buf_printf(srv_buf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    va_list ap2;
    va_copy(ap2, ap);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n > 0) {
        buf_reserve(b, (size_t)n);
        vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap2);
        b->len += (size_t)n;
    }
    va_end(ap2);
}

void srv_buf_consume(srv_buf *b, size_t n)
{
    if (n >= b->len) {
        b->len = 0;
        if (b->data)
            b->data[0] = '\0';
        return;
    }
    memmove(b->data, b->data + n, b->len - n);
    b->len -= n;
    b->data[b->len] = '\0';
}

char *srv_buf_take(srv_buf *b)
{
    char *p = b->data ? b->data : inferd_strdup("");
    b->data = NULL;
    b->len = b->cap = 0;
    return p;
}

void srv_buf_free(srv_buf *b)
{
    inferd_free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
}

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
    return util_utf8_valid((const char *)s, len) ? len : 0;
}

char *srv_utf8_sanitize(const char *s, size_t n)
{
    srv_buf b = {0};
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        size_t k = utf8_seq_len(p + i, n - i);
        if (k == 0) {
            srv_buf_append(&b, "\xef\xbf\xbd", 3);
            i++;
        } else {
            srv_buf_append(&b, p + i, k);
            i += k;
        }
    }
    return srv_buf_take(&b);
}

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
