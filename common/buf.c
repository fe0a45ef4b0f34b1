/* common/buf.c: the growable byte buffer (see buf.h).
 *
 * Growth starts at 64 bytes and doubles, with an overflow check on the size
 * arithmetic (a wrapped size would under-allocate and let memcpy run off the
 * end). printf formats twice, sizing first, so it never truncates.
 */
#include "common/buf.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "common/alloc.h"
#include "common/check.h"

#define BUF_MIN_CAP 64

void inferd_buf_reserve(inferd_buf *b, size_t extra)
{
    size_t need;
    INFERD_CHECK_MSG(!__builtin_add_overflow(b->len, extra, &need) && need < SIZE_MAX,
                     "buffer size overflow");
    need++; /* the NUL */
    if (need <= b->cap)
        return;
    size_t cap = b->cap ? b->cap : BUF_MIN_CAP;
    while (cap < need)
        cap = cap > SIZE_MAX / 2 ? need : cap * 2;
    b->data = inferd_realloc(b->data, cap);
    if (b->cap == 0)
        b->data[0] = '\0';
    b->cap = cap;
}

void inferd_buf_append(inferd_buf *b, const void *data, size_t n)
{
    inferd_buf_reserve(b, n);
    if (n)
        memcpy(b->data + b->len, data, n);
    b->len += n;
    b->data[b->len] = '\0';
}

void inferd_buf_append_str(inferd_buf *b, const char *s)
{
    inferd_buf_append(b, s, strlen(s));
}

void inferd_buf_append_char(inferd_buf *b, char c)
{
    inferd_buf_reserve(b, 1);
    b->data[b->len++] = c;
    b->data[b->len] = '\0';
}

void inferd_buf_vprintf(inferd_buf *b, const char *fmt, va_list ap)
{
    va_list ap2;
    va_copy(ap2, ap);
    int n = vsnprintf(NULL, 0, fmt, ap);
    if (n > 0) {
        inferd_buf_reserve(b, (size_t)n);
        vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap2);
        b->len += (size_t)n;
    }
    va_end(ap2);
}

void inferd_buf_printf(inferd_buf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    inferd_buf_vprintf(b, fmt, ap);
    va_end(ap);
}

void inferd_buf_consume(inferd_buf *b, size_t n)
{
    if (n >= b->len) {
        inferd_buf_reset(b);
        return;
    }
    memmove(b->data, b->data + n, b->len - n);
    b->len -= n;
    b->data[b->len] = '\0';
}

void inferd_buf_reset(inferd_buf *b)
{
    b->len = 0;
    if (b->data)
        b->data[0] = '\0';
}

char *inferd_buf_steal(inferd_buf *b, size_t *len_out)
{
    if (len_out)
        *len_out = b->len;
    char *p = b->data ? b->data : inferd_strdup("");
    b->data = NULL;
    b->len = b->cap = 0;
    return p;
}

void inferd_buf_free(inferd_buf *b)
{
    inferd_free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
}
