/* common/check.c: the abort path of INFERD_CHECK and the CUDA check macros. */
#include "common/check.h"

void inferd_fatal(const char *what, const char *detail, const char *func, const char *file, int line)
{
    fprintf(stderr, "inferd: fatal: %s%s%s in %s at %s:%d\n", what, detail[0] ? ": " : "", detail,
            func, file, line);
    fflush(stderr);
    abort();
}
