/* tests/test_util.c: see test_util.h. */
#include "test_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "common/alloc.h"
#include "common/util.h"
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
    char *p = inferd_malloc(n);
    snprintf(p, n, "%s/%s", d, rel);
    return p;
}

const char *test_inferd_bin(void)
{
    const char *b = getenv("INFERD_BIN");
    return b && *b ? b : NULL;
}

bool test_use_cuda(void)
{
    const char *d = getenv("INFERD_TEST_DEVICE");
    return d && strcmp(d, "cuda") == 0;
}

int test_free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    ck_assert(fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
              getsockname(fd, (struct sockaddr *)&a, &len) == 0);
    close(fd);
    return ntohs(a.sin_port);
}

int test_open_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    int n = 0;
    ck_assert_ptr_nonnull(d);
    while (readdir(d))
        n++;
    closedir(d);
    return n;
}

int test_tp_size(void)
{
    const char *t = getenv("INFERD_TEST_TP");
    int n = t && *t ? atoi(t) : 1;
    return n > 0 ? n : 1;
}

bool test_enforce_eager(void)
{
    const char *e = getenv("INFERD_TEST_EAGER");
    return e && strcmp(e, "1") == 0;
}

bool test_kv_fp8(void)
{
    const char *e = getenv("INFERD_TEST_KV_FP8");
    return e && strcmp(e, "1") == 0;
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
    const int failed = srunner_ntests_failed(sr);
    TestResult **res = srunner_failures(sr);
    int skipped = 0;
    for (int i = 0; i < failed; i++)
        skipped += tr_rtype(res[i]) == CK_ERROR && strstr(tr_msg(res[i]), "Early exit with return value 77") != NULL;
    free(res);
    srunner_free(sr);
    if (skipped > 0 && skipped == failed)
        printf("%d of the tests above skipped (exit 77 in their forked child): not failures\n", skipped);
    return failed > skipped ? 1 : skipped > 0 ? 77 : 0;
}

void test_fill_uniform(float *x, size_t n, uint64_t seed, float lo, float hi)
{
    for (size_t i = 0; i < n; i++)
        x[i] = lo + (hi - lo) * (float)rng_uniform(seed, i);
}

int test_argmax(const float *x, int n)
{
    int best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best])
            best = i;
    return best;
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
    return inferd_strdup(tmpl);
}

char *test_make_temp_dir(const char *prefix)
{
    char tmpl[256];
    snprintf(tmpl, sizeof tmpl, "/tmp/%s-XXXXXX", prefix);
    if (!mkdtemp(tmpl))
        return NULL;
    return inferd_strdup(tmpl);
}

static char *slurp_fd(int fd)
{
    size_t cap = 4096, n = 0;
    char *buf = inferd_malloc(cap);
    for (;;) {
        if (n + 1 >= cap) {
            cap *= 2;
            buf = inferd_realloc(buf, cap);
        }
        ssize_t r = read(fd, buf + n, cap - n - 1);
        if (r <= 0)
            break;
        n += (size_t)r;
    }
    buf[n] = '\0';
    return buf;
}

bool test_run_cmd(char *const argv[], char **out, char **err, int *exit_code)
{
    char *out_path = test_write_temp("inferd-out", "", 0);
    char *err_path = test_write_temp("inferd-err", "", 0);
    pid_t pid = fork();
    if (pid < 0)
        return false;
    if (pid == 0) {
        FILE *o = freopen(out_path, "w", stdout);
        FILE *e = freopen(err_path, "w", stderr);
        (void)o;
        (void)e;
        execv(argv[0], argv);
        _exit(127);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    *exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
    int fo = open(out_path, O_RDONLY), fe = open(err_path, O_RDONLY);
    *out = slurp_fd(fo);
    *err = slurp_fd(fe);
    close(fo);
    close(fe);
    unlink(out_path);
    unlink(err_path);
    inferd_free(out_path);
    inferd_free(err_path);
    return true;
}

struct cJSON *test_golden_stories(void)
{
    char *gp = test_fixture_path("golden/stories260K.json");
    char *text = NULL;
    if (!gp || util_read_file(gp, 0, &text, NULL) != INFERD_OK)
        test_skip("fixture golden/stories260K.json not found");
    inferd_free(gp);
    cJSON *root = cJSON_Parse(text);
    inferd_free(text);
    if (!root)
        test_skip("golden/stories260K.json is not JSON");
    return root;
}

int test_run_rc(char *const argv[], char **out, char **err)
{
    int rc = -1;
    ck_assert_msg(test_run_cmd(argv, out, err, &rc), "cannot run %s", argv[0]);
    return rc;
}

int test_count_char(const char *s, size_t n, char c)
{
    int k = 0;
    for (size_t i = 0; i < n; i++)
        k += s[i] == c;
    return k;
}
