/* tests/fuzz/fuzz_util.c: see fuzz_util.h. */
#include "fuzz_util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"

void fuzz_fail(const char *file, int line, const char *cond, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "==FUZZ ASSERT== %s:%d: %s: ", file, line, cond);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    abort();
}

void fuzz_quiet(void)
{
    const char *e = getenv("FUZZ_LOG");
    if (!e || !*e || strcmp(e, "0") == 0)
        log_set_level(LOG_LEVEL_OFF);
}

const char *fuzz_fixtures(void)
{
    const char *e = getenv("INFERD_FIXTURES");
    return e && *e ? e : INFERD_FIXTURES_DEFAULT;
}

char *fuzz_cstr(const uint8_t *data, size_t n)
{
    char *s = malloc(n + 1);
    if (!s)
        abort();
    if (n)
        memcpy(s, data, n);
    s[n] = '\0';
    return s;
}

static char g_dir[4096];

static void fuzz_rmdir(void)
{
    DIR *d = opendir(g_dir);
    if (!d)
        return;
    struct dirent *e;
    char p[8192];
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
            snprintf(p, sizeof p, "%s/%s", g_dir, e->d_name);
            unlink(p);
        }
    }
    closedir(d);
    rmdir(g_dir);
}

const char *fuzz_tmpdir(void)
{
    if (!g_dir[0]) {
        const char *t = getenv("TMPDIR");
        snprintf(g_dir, sizeof g_dir, "%s/inferd-fuzz.XXXXXX", t && *t ? t : "/tmp");
        if (!mkdtemp(g_dir)) {
            fprintf(stderr, "fuzz: mkdtemp %s: %s\n", g_dir, strerror(errno));
            abort();
        }
        atexit(fuzz_rmdir);
    }
    return g_dir;
}

void fuzz_write(const char *name, const void *data, size_t n)
{
    char p[8192];
    snprintf(p, sizeof p, "%s/%s", fuzz_tmpdir(), name);
    int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) {
        fprintf(stderr, "fuzz: open %s: %s\n", p, strerror(errno));
        abort();
    }
    const char *c = data;
    while (n > 0) {
        ssize_t w = write(fd, c, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            fprintf(stderr, "fuzz: write %s: %s\n", p, strerror(errno));
            abort();
        }
        c += w;
        n -= (size_t)w;
    }
    close(fd);
}

void fuzz_unlink(const char *name)
{
    char p[8192];
    snprintf(p, sizeof p, "%s/%s", fuzz_tmpdir(), name);
    unlink(p);
}

/* Length of the well-formed UTF-8 sequence at s[0..n), 0 when ill-formed
 * (Unicode Table 3-7). */
static size_t utf8_seq(const unsigned char *s, size_t n)
{
    unsigned c = s[0];
    if (c < 0x80)
        return 1;
    size_t len;
    unsigned lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF)
        len = 2;
    else if (c >= 0xE0 && c <= 0xEF) {
        len = 3;
        if (c == 0xE0)
            lo = 0xA0;
        if (c == 0xED)
            hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4;
        if (c == 0xF0)
            lo = 0x90;
        if (c == 0xF4)
            hi = 0x8F;
    } else
        return 0;
    if (n < len || s[1] < lo || s[1] > hi)
        return 0;
    for (size_t i = 2; i < len; i++)
        if (s[i] < 0x80 || s[i] > 0xBF)
            return 0;
    return len;
}

bool fuzz_utf8_valid(const char *s, size_t n)
{
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        size_t l = utf8_seq(u + i, n - i);
        if (!l)
            return false;
        i += l;
    }
    return true;
}

void fuzz_utf8_sanitize(char *s, size_t n)
{
    unsigned char *u = (unsigned char *)s;
    for (size_t i = 0; i < n;) {
        size_t l = utf8_seq(u + i, n - i);
        if (!l) {
            u[i] = '?';
            l = 1;
        }
        i += l;
    }
}
