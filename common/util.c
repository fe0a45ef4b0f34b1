/* common/util.c: see util.h. */
#include "common/util.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "common/alloc.h"

int64_t util_now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

double util_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

int64_t util_unix_s(void)
{
    return (int64_t)time(NULL);
}

inferd_deadline inferd_deadline_from(double start_s, double timeout_s)
{
    if (timeout_s < 0 || isnan(timeout_s))
        return inferd_deadline_never();
    return (inferd_deadline){.at = start_s + timeout_s, .never = false};
}

inferd_deadline inferd_deadline_in_s(double timeout_s)
{
    return inferd_deadline_from(util_now_s(), timeout_s);
}

inferd_deadline inferd_deadline_in_ms(int64_t timeout_ms)
{
    return inferd_deadline_in_s(timeout_ms < 0 ? -1.0 : (double)timeout_ms * 1e-3);
}

inferd_deadline inferd_deadline_never(void)
{
    return (inferd_deadline){.at = HUGE_VAL, .never = true};
}

bool inferd_deadline_expired(inferd_deadline d)
{
    return !d.never && util_now_s() >= d.at;
}

double inferd_deadline_remaining_s(inferd_deadline d)
{
    if (d.never)
        return HUGE_VAL;
    double left = d.at - util_now_s();
    return left > 0 ? left : 0.0;
}

int inferd_deadline_remaining_ms(inferd_deadline d)
{
    if (d.never)
        return -1;
    double ms = ceil(inferd_deadline_remaining_s(d) * 1e3);
    return ms >= (double)INT_MAX ? INT_MAX : (int)ms;
}

bool inferd_deadline_cond_wait(inferd_deadline d, pthread_cond_t *cv, pthread_mutex_t *mu)
{
    if (d.never) {
        pthread_cond_wait(cv, mu);
        return true;
    }
    if (inferd_deadline_expired(d))
        return false;
    /* util_now_s is CLOCK_MONOTONIC seconds, so `at` converts directly. */
    double whole = floor(d.at);
    struct timespec ts = {.tv_sec = (time_t)whole, .tv_nsec = (long)((d.at - whole) * 1e9)};
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    return pthread_cond_timedwait(cv, mu, &ts) != ETIMEDOUT;
}

inferd_status util_read_file(const char *path, size_t max_bytes, char **out, size_t *out_len)
{
    if (max_bytes == 0)
        max_bytes = (size_t)1 << 30;
    FILE *f = fopen(path, "rb");
    if (!f)
        return inferd_set_error(INFERD_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
        fclose(f);
        return inferd_set_error(INFERD_ERR_IO, "%s: not a regular file", path);
    }
    if ((uint64_t)st.st_size > max_bytes) {
        fclose(f);
        return inferd_set_error(INFERD_ERR_FORMAT, "%s: file too large (%lld bytes, limit %zu)", path,
                                (long long)st.st_size, max_bytes);
    }
    size_t n = (size_t)st.st_size;
    char *buf = inferd_try_malloc(n + 1);
    if (!buf) {
        fclose(f);
        return inferd_set_error(INFERD_ERR_NOMEM, "%s: cannot allocate %zu bytes", path, n);
    }
    size_t got = fread(buf, 1, n, f);
    fclose(f);
    if (got != n) {
        inferd_free(buf);
        return inferd_set_error(INFERD_ERR_IO, "%s: short read", path);
    }
    buf[n] = '\0';
    *out = buf;
    if (out_len)
        *out_len = n;
    return INFERD_OK;
}

bool util_file_exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

bool util_write_text_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return false;
    const size_t len = strlen(text);
    bool ok = fwrite(text, 1, len, f) == len && fputc('\n', f) != EOF;
    ok = fclose(f) == 0 && ok;
    return ok;
}

char *util_path_join(const char *dir, const char *name)
{
    size_t a = strlen(dir), b = strlen(name);
    char *p = inferd_malloc(a + b + 2);
    memcpy(p, dir, a);
    size_t k = a;
    if (a > 0 && dir[a - 1] != '/')
        p[k++] = '/';
    memcpy(p + k, name, b + 1);
    return p;
}

bool util_parse_int(const char *s, long long lo, long long hi, long long *out)
{
    if (!s || !*s)
        return false;
    errno = 0;
    char *end = NULL;
    long long v = strtoll(s, &end, 10);
    if (errno != 0 || *end != '\0' || v < lo || v > hi)
        return false;
    *out = v;
    return true;
}

bool util_parse_double(const char *s, double *out)
{
    if (!s || !*s)
        return false;
    errno = 0;
    char *end = NULL;
    double v = strtod(s, &end);
    if (errno != 0 || *end != '\0' || !isfinite(v))
        return false;
    *out = v;
    return true;
}

inferd_status util_parse_int_list(const char *s, int32_t **out, int *n_out)
{
    int cap = 16, n = 0;
    int32_t *v = inferd_malloc(sizeof(int32_t) * cap);
    const char *p = s;
    for (;;) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        char item[32];
        if (len == 0 || len >= sizeof item) {
            inferd_free(v);
            return inferd_set_error(INFERD_ERR_INVALID_ARG, "bad integer list '%s'", s);
        }
        memcpy(item, p, len);
        item[len] = '\0';
        long long x;
        if (!util_parse_int(item, INT32_MIN, INT32_MAX, &x)) {
            inferd_free(v);
            return inferd_set_error(INFERD_ERR_INVALID_ARG, "bad integer '%s' in list", item);
        }
        if (n == cap) {
            cap *= 2;
            v = inferd_realloc(v, sizeof(int32_t) * cap);
        }
        v[n++] = (int32_t)x;
        if (!comma)
            break;
        p = comma + 1;
    }
    *out = v;
    *n_out = n;
    return INFERD_OK;
}

bool util_utf8_valid(const char *s, size_t n)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        unsigned c = p[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        int len;
        uint32_t cp;
        if ((c & 0xE0) == 0xC0) {
            len = 2;
            cp = c & 0x1F;
        } else if ((c & 0xF0) == 0xE0) {
            len = 3;
            cp = c & 0x0F;
        } else if ((c & 0xF8) == 0xF0) {
            len = 4;
            cp = c & 0x07;
        } else {
            return false;
        }
        if (i + (size_t)len > n)
            return false;
        for (int k = 1; k < len; k++) {
            if ((p[i + k] & 0xC0) != 0x80)
                return false;
            cp = (cp << 6) | (p[i + k] & 0x3F);
        }
        if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) ||
            cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
            return false;
        i += (size_t)len;
    }
    return true;
}
