/* common/alloc.c: allocation wrappers (see alloc.h). */
#include "common/alloc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/check.h"

static void oom(size_t n)
{
    fprintf(stderr, "inferd: fatal: out of memory allocating %zu bytes\n", n);
    abort();
}

void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p)
        oom(n);
    return p;
}

void *xcalloc(size_t count, size_t size)
{
    void *p = calloc(count ? count : 1, size ? size : 1);
    if (!p)
        oom(count * size);
    return p;
}

void *xrealloc(void *p, size_t n)
{
    void *q = realloc(p, n ? n : 1);
    if (!q)
        oom(n);
    return q;
}

char *xstrdup(const char *s)
{
    return xstrndup(s, strlen(s));
}

char *xstrndup(const char *s, size_t n)
{
    char *p = xmalloc(n + 1);
    memcpy(p, s, n);
    p[n] = '\0';
    return p;
}

void xfree(void *p)
{
    free(p);
}

void *try_malloc(size_t n)
{
    return malloc(n ? n : 1);
}

void *try_calloc(size_t count, size_t size)
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
