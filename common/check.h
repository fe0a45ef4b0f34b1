/* common/check.h: fatal checks for broken invariants.
 *
 * INFERD_CHECK is for conditions that can only fail through a bug (or an
 * unrecoverable device fault): it prints the failed statement, function,
 * file:line and aborts. Recoverable failures return inferd_status instead.
 */
#ifndef INFERD_COMMON_CHECK_H
#define INFERD_COMMON_CHECK_H

#include <stdio.h>
#include <stdlib.h>

void inferd_fatal(const char *what, const char *detail, const char *func, const char *file, int line)
    __attribute__((noreturn));

#define INFERD_CHECK(cond)                                                          \
    do {                                                                     \
        if (__builtin_expect(!(cond), 0))                                    \
            inferd_fatal("INFERD_CHECK(" #cond ") failed", "", __func__, __FILE__, __LINE__); \
    } while (0)

#define INFERD_CHECK_MSG(cond, msg)                                                 \
    do {                                                                     \
        if (__builtin_expect(!(cond), 0))                                    \
            inferd_fatal("INFERD_CHECK(" #cond ") failed", (msg), __func__, __FILE__, __LINE__); \
    } while (0)

/* Debug-only invariant checks (compiled out with NDEBUG). */
#ifdef NDEBUG
#define INFERD_DCHECK(cond) ((void)0)
#else
#define INFERD_DCHECK(cond) INFERD_CHECK(cond)
#endif

#endif
