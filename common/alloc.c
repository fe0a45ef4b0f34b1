/* common/alloc.c: allocation wrappers (see alloc.h).
 *
 * With jemalloc (every build but the sanitizer one), malloc_conf below makes
 * freed memory go back to the OS: a background thread purges dirty pages
 * after 1 s and muzzy pages at once, so a burst of large request bodies or
 * tokenizer scratch does not stay resident for good (jemalloc's defaults
 * keep dirty pages 10 s and purge only on later allocator activity, which
 * an idle server never has). jemalloc's background threads block every
 * signal, so srv_run's sigtimedwait still receives SIGINT/SIGTERM. The
 * MALLOC_CONF environment variable still overrides these values.
 */
#include "common/alloc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/check.h"

#ifdef INFERD_JEMALLOC
/* Read by jemalloc at its initialisation (Debian's jemalloc has no symbol prefix). */
const char *malloc_conf = "background_thread:true,dirty_decay_ms:1000,muzzy_decay_ms:0";
#endif

static void oom(size_t n)
{
    fprintf(stderr, "inferd: fatal: out of memory allocating %zu bytes\n", n);
    abort();
}

void *inferd_malloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p)
        oom(n);
    return p;
}

void *inferd_calloc(size_t count, size_t size)
{
    void *p = calloc(count ? count : 1, size ? size : 1);
    if (!p)
        oom(count * size);
    return p;
}

void *inferd_realloc(void *p, size_t n)
{
    void *q = realloc(p, n ? n : 1);
    if (!q)
        oom(n);
    return q;
}

char *inferd_strdup(const char *s)
{
    return inferd_strndup(s, strlen(s));
}

char *inferd_strndup(const char *s, size_t n)
{
    char *p = inferd_malloc(n + 1);
    memcpy(p, s, n);
    p[n] = '\0';
    return p;
}

void inferd_free(void *p)
{
    free(p);
}

void *inferd_try_malloc(size_t n)
{
    return malloc(n ? n : 1);
}

void *inferd_try_calloc(size_t count, size_t size)
{
    return calloc(count ? count : 1, size ? size : 1);
}

const char *alloc_name(void)
{
#ifdef INFERD_JEMALLOC
    return "jemalloc";
#else
    return "libc";
#endif
}
