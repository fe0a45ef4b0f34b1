/* common/alloc.h: allocation wrappers.
 *
 * The process allocator is jemalloc (linked in non-sanitizer builds, where it
 * replaces malloc). The x* wrappers treat failure of a small allocation as
 * fatal, like redis' zmalloc: they never return NULL. Large allocations whose
 * size comes from user input or configuration (KV pools, weight slabs) use
 * inferd_try_malloc and report INFERD_ERR_NOMEM instead.
 */
#ifndef INFERD_COMMON_ALLOC_H
#define INFERD_COMMON_ALLOC_H

#include <stddef.h>

void *inferd_malloc(size_t n);
void *inferd_calloc(size_t count, size_t size);
void *inferd_realloc(void *p, size_t n);
char *inferd_strdup(const char *s);
char *inferd_strndup(const char *s, size_t n);
void inferd_free(void *p);
/* NULL on failure (no abort). */
void *inferd_try_malloc(size_t n);
void *inferd_try_calloc(size_t count, size_t size);
/* Name of the allocator in use ("jemalloc" or "libc"). */
const char *alloc_name(void);

#endif
