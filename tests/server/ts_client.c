/* tests/server/ts_client.c: see ts_client.h.
 *
 * The server runs as a child process with PR_SET_PDEATHSIG, so a test that
 * fails (and exits) never leaves a server behind; its stdout/stderr go to a
 * log file under /tmp whose tail is printed when a test wants to explain a
 * failure. Ports come from binding port 0 on 127.0.0.1 and releasing it; the
 * start is retried on another port if the server could not bind.
 */
#include "ts_client.h"

#include <arpa/inet.h>
#include <check.h>
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/util.h"
#include "prom_check.h"
#include "test_util.h"

#define MAX_ARGS 64

double ts_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

bool ts_have_server(void)
{
    char *model = test_fixture_path("models/stories260K/model.safetensors");
    const bool ok = test_inferd_bin() && model && util_file_exists(model);
    inferd_free(model);
    return ok;
}

void ts_require_server(void)
{
    if (!test_inferd_bin())
        test_skip("INFERD_BIN not set (run through ctest)");
    if (!ts_have_server())
        test_skip("fixture models/stories260K not found");
}

void ts_sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static int free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = 0, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    int port = -1;
    if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
        getsockname(fd, (struct sockaddr *)&a, &len) == 0)
        port = ntohs(a.sin_port);
    if (fd >= 0)
        close(fd);
    return port;
}

static bool has_flag(const char *const *args, const char *flag)
{
    for (int i = 0; args && args[i]; i++)
        if (!strcmp(args[i], flag))
            return true;
    return false;
}

static pid_t spawn(ts_server *s, const char *bin, const char *model, const char *const *args)
{
    const char *argv[MAX_ARGS];
    int n = 0;
    char port[16];
    snprintf(port, sizeof port, "%d", s->port);
    argv[n++] = bin;
    argv[n++] = "serve";
    if (!has_flag(args, "--model")) {
        argv[n++] = "--model";
        argv[n++] = model;
    }
    const char *fixed[] = {"--device", "cpu", "--threads", "1", "--host", "127.0.0.1", "--port", port};
    for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++)
        argv[n++] = fixed[i];
    if (!has_flag(args, "--log-level")) {
        argv[n++] = "--log-level";
        argv[n++] = "info";
    }
    for (int i = 0; args && args[i] && n < MAX_ARGS - 1; i++)
        argv[n++] = args[i];
    argv[n] = NULL;
    pid_t pid = fork();
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        int fd = open(s->log_path, O_WRONLY | O_CREAT | O_APPEND, 0644);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
            close(fd);
        }
        execv(bin, (char *const *)argv);
        _exit(127);
    }
    return pid;
}

static bool wait_health(ts_server *s, double timeout_s)
{
    double end = ts_now() + timeout_s;
    while (ts_now() < end) {
        int st;
        if (waitpid(s->pid, &st, WNOHANG) == s->pid) {
            s->pid = -1;
            return false;
        }
        ts_resp r = ts_request(s, "GET", "/health", NULL, 0, "");
        long code = r.status;
        ts_resp_free(&r);
        if (code == 200)
            return true;
        ts_sleep_ms(50);
    }
    return false;
}

bool ts_start(ts_server *s, const char *const *args)
{
    static bool curl_ready;
    if (!curl_ready) {
        curl_global_init(CURL_GLOBAL_DEFAULT);
        curl_ready = true;
    }
    const char *bin = test_inferd_bin();
    if (!bin)
        test_skip("INFERD_BIN not set (run through ctest)");
    char *model = test_fixture_path("models/stories260K");
    if (!model || access(model, R_OK) != 0)
        test_skip("fixture models/stories260K not found");
    memset(s, 0, sizeof *s);
    for (int i = 0; args && args[i]; i++)
        if (!strcmp(args[i], "--api-key") && args[i + 1])
            s->api_key = args[i + 1];
    snprintf(s->log_path, sizeof s->log_path, "/tmp/inferd-test-%d-%d.log", (int)getpid(), rand() % 100000);
    bool ok = false;
    for (int attempt = 0; attempt < 3 && !ok; attempt++) {
        s->port = free_port();
        snprintf(s->base, sizeof s->base, "http://127.0.0.1:%d", s->port);
        s->pid = spawn(s, bin, model, args);
        ok = s->pid > 0 && wait_health(s, 30.0);
        if (!ok && s->pid > 0) {
            kill(s->pid, SIGKILL);
            waitpid(s->pid, NULL, 0);
            s->pid = -1;
        }
    }
    free(model);
    if (!ok)
        ts_dump_log(s);
    return ok;
}

int ts_stop(ts_server *s, double timeout_s)
{
    if (s->pid <= 0)
        return -1;
    kill(s->pid, SIGTERM);
    double end = ts_now() + timeout_s;
    int st = 0;
    while (ts_now() < end) {
        pid_t r = waitpid(s->pid, &st, WNOHANG);
        if (r == s->pid) {
            s->pid = -1;
            int rc = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
            if (rc == 0)
                unlink(s->log_path); /* kept for diagnosis otherwise */
            return rc;
        }
        ts_sleep_ms(20);
    }
    kill(s->pid, SIGKILL);
    waitpid(s->pid, NULL, 0);
    s->pid = -1;
    return -1;
}

bool ts_log_contains(const ts_server *s, const char *needle)
{
    FILE *f = fopen(s->log_path, "r");
    if (!f)
        return false;
    char line[4096];
    bool found = false;
    while (!found && fgets(line, sizeof line, f))
        found = strstr(line, needle) != NULL;
    fclose(f);
    return found;
}

void ts_dump_log(const ts_server *s)
{
    FILE *f = fopen(s->log_path, "r");
    if (!f)
        return;
    static char buf[1 << 16];
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, sz > (long)sizeof buf - 1 ? sz - (long)sizeof buf + 1 : 0, SEEK_SET);
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = '\0';
    fclose(f);
    fprintf(stderr, "---- server log tail (%s) ----\n%s\n----\n", s->log_path, buf);
}

/* ---- libcurl ---------------------------------------------------------------- */

static size_t on_body(char *p, size_t sz, size_t nm, void *user)
{
    ts_resp *r = user;
    size_t n = sz * nm;
    r->body = realloc(r->body, r->len + n + 1);
    memcpy(r->body + r->len, p, n);
    r->len += n;
    r->body[r->len] = '\0';
    return n;
}

static void header_value(const char *line, size_t n, const char *name, char *out, size_t out_n)
{
    size_t k = strlen(name);
    if (n <= k + 1 || strncasecmp(line, name, k) != 0 || line[k] != ':')
        return;
    const char *v = line + k + 1;
    while (*v == ' ')
        v++;
    size_t m = n - (size_t)(v - line);
    while (m && (v[m - 1] == '\r' || v[m - 1] == '\n'))
        m--;
    snprintf(out, out_n, "%.*s", (int)m, v);
}

static size_t on_header(char *p, size_t sz, size_t nm, void *user)
{
    ts_resp *r = user;
    size_t n = sz * nm;
    header_value(p, n, "Retry-After", r->retry_after, sizeof r->retry_after);
    header_value(p, n, "Allow", r->allow, sizeof r->allow);
    header_value(p, n, "Content-Type", r->ctype, sizeof r->ctype);
    return n;
}

ts_resp ts_request(const ts_server *s, const char *method, const char *path, const char *body, long body_len,
                   const char *auth)
{
    ts_resp r;
    memset(&r, 0, sizeof r);
    r.body = calloc(1, 1);
    CURL *c = curl_easy_init();
    char url[512];
    snprintf(url, sizeof url, "%s%s", s->base, path);
    struct curl_slist *h = curl_slist_append(NULL, "Content-Type: application/json");
    char ah[512];
    if (!auth && s->api_key) {
        snprintf(ah, sizeof ah, "Authorization: Bearer %s", s->api_key);
        h = curl_slist_append(h, ah);
    } else if (auth && *auth) {
        snprintf(ah, sizeof ah, "Authorization: %s", auth);
        h = curl_slist_append(h, ah);
    }
    h = curl_slist_append(h, "Expect:");
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &r);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, &r);
    curl_easy_setopt(c, CURLOPT_TIMEOUT, 20L);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_NOPROXY, "*");
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, r.error);
    if (body) {
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, body_len < 0 ? (long)strlen(body) : body_len);
    }
    CURLcode rc = curl_easy_perform(c);
    if (rc == CURLE_OK)
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r.status);
    else if (rc != CURLE_COULDNT_CONNECT)
        fprintf(stderr, "ts_request %s %s: %s\n", method, path, r.error);
    curl_slist_free_all(h);
    curl_easy_cleanup(c);
    return r;
}

void ts_resp_free(ts_resp *r)
{
    free(r->body);
    r->body = NULL;
}

cJSON *ts_post_json(const ts_server *s, const char *path, const char *body, long *status)
{
    ts_resp r = ts_request(s, "POST", path, body, -1, NULL);
    cJSON *j = cJSON_Parse(r.body);
    if (status)
        *status = r.status;
    ts_resp_free(&r);
    return j;
}

static void append_choice_text(const cJSON *ev, char **text, size_t *len)
{
    const cJSON *ch = cJSON_GetArrayItem(cJSON_GetObjectItem(ev, "choices"), 0);
    if (!ch)
        return;
    const cJSON *t = cJSON_GetObjectItem(ch, "text");
    if (!cJSON_IsString(t))
        t = cJSON_GetObjectItem(cJSON_GetObjectItem(ch, "delta"), "content");
    if (!cJSON_IsString(t))
        return;
    size_t n = strlen(t->valuestring);
    *text = realloc(*text, *len + n + 1);
    memcpy(*text + *len, t->valuestring, n + 1);
    *len += n;
}

bool ts_sse_parse(const char *body, char **text, int *n_events, cJSON **last, cJSON **first)
{
    *text = calloc(1, 1);
    *n_events = 0;
    *last = NULL;
    if (first)
        *first = NULL;
    size_t len = 0;
    bool done = false;
    const char *p = body;
    while (*p) {
        const char *end = strstr(p, "\n\n");
        if (!end)
            return false;
        if (strncmp(p, "data: ", 6) != 0 || done)
            return false;
        char *data = strndup(p + 6, (size_t)(end - p - 6));
        if (!strcmp(data, "[DONE]")) {
            done = true;
        } else {
            cJSON *ev = cJSON_Parse(data);
            if (!ev) {
                free(data);
                return false;
            }
            append_choice_text(ev, text, &len);
            (*n_events)++;
            if (first && !*first) {
                *first = ev;
            } else {
                cJSON_Delete(*last);
                *last = ev;
            }
        }
        free(data);
        p = end + 2;
    }
    if (first && *first && !*last) {
        *last = cJSON_Duplicate(*first, true);
    }
    return done;
}

char *ts_stories_dir(const char *tag, const cJSON *tokenizer_config)
{
    char *dir = test_make_temp_dir(tag);
    char *src = test_fixture_path("models/stories260K");
    static const char *const k_files[] = {"config.json", "model.safetensors", "tokenizer.json"};
    for (size_t i = 0; i < sizeof k_files / sizeof k_files[0]; i++) {
        char *from = util_path_join(src, k_files[i]), *to = util_path_join(dir, k_files[i]);
        ck_assert_msg(symlink(from, to) == 0, "symlink %s", to);
        inferd_free(from);
        inferd_free(to);
    }
    if (tokenizer_config) {
        char *text = cJSON_Print(tokenizer_config);
        char *path = util_path_join(dir, "tokenizer_config.json");
        ck_assert_msg(util_write_text_file(path, text), "cannot write %s", path);
        cJSON_free(text);
        inferd_free(path);
    }
    inferd_free(src);
    return dir;
}

void ts_stop_ok(ts_server *s)
{
    int rc = ts_stop(s, 30.0);
    if (rc != 0)
        ts_dump_log(s);
    ck_assert_msg(rc == 0, "server exit status %d after SIGTERM", rc);
}

cJSON *ts_post_ok(const ts_server *s, const char *path, const char *body)
{
    long st;
    cJSON *j = ts_post_json(s, path, body, &st);
    ck_assert_msg(st == 200 && j, "%s: HTTP %ld for %s", path, st, body);
    return j;
}

cJSON *ts_sse_events(const char *body, const char **why)
{
    cJSON *arr = cJSON_CreateArray();
    const char *p = body;
    bool done = false;
    *why = NULL;
    while (!*why && (p = strstr(p, "data: ")) != NULL) {
        p += 6;
        const char *end = strstr(p, "\n\n");
        if (!end)
            *why = "an event without its blank line";
        else if (done)
            *why = "data after [DONE]";
        else if (!strncmp(p, "[DONE]", 6))
            done = true;
        else {
            cJSON *e = cJSON_ParseWithLength(p, (size_t)(end - p));
            if (e)
                cJSON_AddItemToArray(arr, e);
            else
                *why = "an event that is not JSON";
        }
        p = end;
    }
    if (!*why && !done)
        *why = "no [DONE]";
    if (*why) {
        cJSON_Delete(arr);
        return NULL;
    }
    return arr;
}

cJSON *ts_sse_events_ok(const char *body)
{
    const char *why = NULL;
    cJSON *arr = ts_sse_events(body, &why);
    ck_assert_msg(arr != NULL, "bad SSE stream: %s", why ? why : "?");
    return arr;
}

char *ts_metrics(const ts_server *s)
{
    ts_resp r = ts_request(s, "GET", "/metrics", NULL, 0, "");
    if (r.status != 200) {
        ts_resp_free(&r);
        return NULL;
    }
    return r.body;
}

double ts_metric(const ts_server *s, const char *series)
{
    char *m = ts_metrics(s);
    double v = NAN;
    if (m && !prom_value(m, series, &v))
        v = NAN;
    free(m);
    return v;
}

bool ts_wait_engine(const ts_server *s, int want_running, int want_waiting, bool want_kv_zero,
                    double timeout_s)
{
    double end = ts_now() + timeout_s;
    do {
        char *m = ts_metrics(s);
        double run = NAN, wait = NAN, used = NAN;
        if (m) {
            prom_value(m, "inferd:num_requests_running", &run);
            prom_value(m, "inferd:num_requests_waiting", &wait);
            prom_value(m, "inferd:kv_cache_blocks_used", &used);
        }
        free(m);
        if (run == want_running && wait == want_waiting && (!want_kv_zero || used == 0))
            return true;
        ts_sleep_ms(20);
    } while (ts_now() < end);
    return false;
}

bool ts_wait_metric(const ts_server *s, const char *series, double want, double timeout_s)
{
    double end = ts_now() + timeout_s;
    do {
        if (ts_metric(s, series) == want)
            return true;
        ts_sleep_ms(20);
    } while (ts_now() < end);
    fprintf(stderr, "ts_wait_metric: %s is %g, want %g\n", series, ts_metric(s, series), want);
    return false;
}

char *ts_golden_text(void)
{
    cJSON *g = test_golden_stories();
    const cJSON *c = cJSON_GetArrayItem(cJSON_GetObjectItem(g, "cases"), 0);
    const char *prompt = cJSON_GetStringValue(cJSON_GetObjectItem(c, "prompt"));
    const char *out = cJSON_GetStringValue(cJSON_GetObjectItem(c, "stdout_text"));
    char *cont = NULL;
    if (prompt && out && !strcmp(prompt, "Once upon a time") &&
        cJSON_GetObjectItem(c, "n_generated")->valueint == 60 && !strncmp(out, prompt, strlen(prompt)))
        cont = strdup(out + strlen(prompt));
    cJSON_Delete(g);
    return cont;
}

/* ---- raw sockets ------------------------------------------------------------- */

int ts_raw_send(const ts_server *s, const char *bytes, size_t n)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)s->port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof a) != 0 || write(fd, bytes, n) != (ssize_t)n) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    return fd;
}

int ts_raw_connect(const ts_server *s, const char *src_ip)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_in src = {.sin_family = AF_INET, .sin_port = 0};
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)s->port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if ((src_ip && (inet_pton(AF_INET, src_ip, &src.sin_addr) != 1 ||
                    bind(fd, (struct sockaddr *)&src, sizeof src) != 0)) ||
        connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

int ts_raw_exchange(const ts_server *s, const char *req, int timeout_ms, char **out)
{
    int fd = ts_raw_send(s, req, strlen(req));
    if (out)
        *out = NULL;
    if (fd < 0)
        return 0;
    char *acc = NULL;
    size_t n = 0;
    ts_raw_read_until(fd, "\x01never\x01", timeout_ms, &acc, &n); /* until closed */
    close(fd);
    int status = 0;
    if (acc && strncmp(acc, "HTTP/1.", 7) == 0 && strlen(acc) > 12)
        status = atoi(acc + 9);
    if (out)
        *out = acc;
    else
        free(acc);
    return status;
}

int ts_raw_post(const ts_server *s, const char *path, const char *json)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)s->port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    size_t n = strlen(json);
    char head[512];
    int hn = snprintf(head, sizeof head,
                      "POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                      "%s%s%sContent-Length: %zu\r\n\r\n",
                      path, s->api_key ? "Authorization: Bearer " : "", s->api_key ? s->api_key : "",
                      s->api_key ? "\r\n" : "", n);
    if (write(fd, head, (size_t)hn) != hn || write(fd, json, n) != (ssize_t)n) {
        close(fd);
        return -1;
    }
    return fd;
}

bool ts_raw_read_until(int fd, const char *needle, int timeout_ms, char **acc, size_t *acc_len)
{
    double end = ts_now() + timeout_ms / 1000.0;
    if (!*acc)
        *acc = calloc(1, 1);
    while (!strstr(*acc, needle)) {
        int left = (int)((end - ts_now()) * 1000);
        if (left <= 0)
            return false;
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, left) <= 0)
            return false;
        char buf[4096];
        ssize_t n = read(fd, buf, sizeof buf);
        if (n <= 0)
            return strstr(*acc, needle) != NULL;
        *acc = realloc(*acc, *acc_len + (size_t)n + 1);
        memcpy(*acc + *acc_len, buf, (size_t)n);
        *acc_len += (size_t)n;
        (*acc)[*acc_len] = '\0';
    }
    return true;
}
