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
