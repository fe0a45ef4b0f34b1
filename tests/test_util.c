/* tests/test_util.c: see test_util.h. */
#include "test_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/rng.h"

const char *test_fixtures_dir(void)
{
    static char buf[4096];
    const char *env = getenv("INFERD_FIXTURES");
    const char *dir = env && *env ? env : "../shared/fixtures";
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
        return NULL;
    snprintf(buf, sizeof buf, "%s", dir);
    return buf;
}

char *test_fixture_path(const char *rel)
{
    const char *d = test_fixtures_dir();
    if (!d)
        return NULL;
    size_t n = strlen(d) + strlen(rel) + 2;
    char *p = xmalloc(n);
    snprintf(p, n, "%s/%s", d, rel);
    return p;
}

const char *test_inferd_bin(void)
{
    const char *b = getenv("INFERD_BIN");
    return b && *b ? b : NULL;
}

void test_skip(const char *why)
{
    printf("SKIP: %s\n", why);
    fflush(stdout);
    exit(77);
}

int test_run_suite(Suite *s)
{
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? 0 : 1;
}

void test_fill_uniform(float *x, size_t n, uint64_t seed, float lo, float hi)
{
    for (size_t i = 0; i < n; i++)
        x[i] = lo + (hi - lo) * (float)rng_uniform(seed, i);
}

char *test_write_temp(const char *prefix, const void *data, size_t len)
{
    char tmpl[256];
    snprintf(tmpl, sizeof tmpl, "/tmp/%s-XXXXXX", prefix);
    int fd = mkstemp(tmpl);
    if (fd < 0)
        return NULL;
    size_t off = 0;
    while (off < len) {
        ssize_t w = write(fd, (const char *)data + off, len - off);
        if (w <= 0)
            break;
        off += (size_t)w;
    }
    close(fd);
    return xstrdup(tmpl);
}

char *test_make_temp_dir(const char *prefix)
{
    char tmpl[256];
    snprintf(tmpl, sizeof tmpl, "/tmp/%s-XXXXXX", prefix);
    if (!mkdtemp(tmpl))
        return NULL;
    return xstrdup(tmpl);
}
