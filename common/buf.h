/* common/buf.h: one growable byte buffer for every module (HTTP bodies and
 * SSE output, JSON and chat-template text, tokenizer scratch, engine text).
 *
 * The bytes live in data[0..len) and are always followed by a NUL once the
 * buffer holds storage, so data can be used as a C string; a zeroed struct
 * (INFERD_BUF_INIT) is an empty buffer with no storage (data == NULL). The
 * capacity doubles, so appending n bytes one at a time costs O(n). Memory
 * comes from inferd_realloc, which aborts on exhaustion: the appenders
 * cannot fail.
 *
 * Not thread-safe: a buffer belongs to one owner at a time.
 */
#ifndef INFERD_COMMON_BUF_H
#define INFERD_COMMON_BUF_H

#include <stdarg.h>
#include <stddef.h>

typedef struct {
    char *data; /* [cap]: len bytes + NUL; NULL until the first reserve */
    size_t len, cap;
} inferd_buf;

#define INFERD_BUF_INIT {NULL, 0, 0}

/* Make room for `extra` more bytes plus the NUL; afterwards data != NULL
 * (reserve(b, 0) gives an empty buffer a "" string). */
void inferd_buf_reserve(inferd_buf *b, size_t extra);

/* Append n bytes (n may be 0; data may then be NULL). */
void inferd_buf_append(inferd_buf *b, const void *data, size_t n);
/* Append a NUL-terminated string (without its NUL). */
void inferd_buf_append_str(inferd_buf *b, const char *s);
void inferd_buf_append_char(inferd_buf *b, char c);
/* Append printf-formatted text. */
void inferd_buf_printf(inferd_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void inferd_buf_vprintf(inferd_buf *b, const char *fmt, va_list ap) __attribute__((format(printf, 2, 0)));

/* Drop the first n bytes (consumed output); n >= len empties the buffer. */
void inferd_buf_consume(inferd_buf *b, size_t n);
/* Empty the buffer but keep its storage for reuse. */
void inferd_buf_reset(inferd_buf *b);

/* The contents as a C string: "" for a buffer without storage. */
static inline const char *inferd_buf_str(const inferd_buf *b)
{
    return b->data ? b->data : "";
}

/* Hand the heap string to the caller (never NULL; inferd_free it) and leave
 * the buffer empty without storage. *len_out (when not NULL) gets len. */
char *inferd_buf_steal(inferd_buf *b, size_t *len_out);

/* Free the storage; the buffer is empty and reusable afterwards. */
void inferd_buf_free(inferd_buf *b);

#endif
