/* tests/server/test_server.c: black-box tests of `inferd serve` on the CPU
 * backend with stories260K: completions and chat, the reference greedy text
 * (llama2.c golden), streamed == non-streamed text, 64 concurrent clients
 * getting the same greedy text as alone, the auxiliary endpoints, timings in
 * every response, /metrics validated as Prometheus text, the config file,
 * and a clean SIGTERM exit (0) after every test.
 */
#include <arpa/inet.h>
#include <curl/curl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/util.h"
#include "prom_check.h"
#include "test_util.h"
#include "ts_client.h"

#define GOLDEN_PROMPT "Once upon a time"

static char *golden_text(void)
{
    char *g = ts_golden_text();
    ck_assert_msg(g != NULL, "golden/stories260K.json: unexpected first case");
    return g;
}

static void check_timings(const cJSON *j)
{
    const cJSON *t = cJSON_GetObjectItem(j, "timings");
    ck_assert_msg(cJSON_IsObject(t), "no timings object");
    const char *k[] = {"queue_ms", "ttft_ms", "prefill_ms", "decode_ms", "total_ms"};
    for (size_t i = 0; i < 5; i++) {
        const cJSON *v = cJSON_GetObjectItem(t, k[i]);
        ck_assert_msg(cJSON_IsNumber(v) && v->valuedouble >= 0, "timings.%s missing", k[i]);
    }
    ck_assert(cJSON_GetObjectItem(t, "total_ms")->valuedouble >=
              cJSON_GetObjectItem(t, "ttft_ms")->valuedouble);
}

static void check_usage(const cJSON *j, int completion)
{
    const cJSON *u = cJSON_GetObjectItem(j, "usage");
    ck_assert_msg(cJSON_IsObject(u), "no usage");
    int p = cJSON_GetObjectItem(u, "prompt_tokens")->valueint;
    int c = cJSON_GetObjectItem(u, "completion_tokens")->valueint;
    ck_assert_int_gt(p, 0);
    if (completion >= 0)
        ck_assert_int_eq(c, completion);
    ck_assert_int_eq(cJSON_GetObjectItem(u, "total_tokens")->valueint, p + c);
}

static const char *choice_text(const cJSON *j)
{
    const cJSON *ch = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0);
    const cJSON *t = cJSON_GetObjectItem(ch, "text");
    if (!t)
        t = cJSON_GetObjectItem(cJSON_GetObjectItem(ch, "message"), "content");
    ck_assert_msg(cJSON_IsString(t), "no choice text");
    return t->valuestring;
}


START_TEST(test_completions_and_chat)
{
    ts_server s;
    const char *args[] = {"--chat-template", "chatml", NULL};
    ck_assert(ts_start(&s, args));
    char *golden = golden_text();
    long st;
    cJSON *j = ts_post_json(&s, "/v1/completions",
                            "{\"model\":\"stories260K\",\"prompt\":\"" GOLDEN_PROMPT
                            "\",\"max_tokens\":60,\"temperature\":0}",
                            &st);
    ck_assert_int_eq(st, 200);
    ck_assert_str_eq(cJSON_GetObjectItem(j, "object")->valuestring, "text_completion");
    ck_assert_str_eq(cJSON_GetObjectItem(j, "model")->valuestring, "stories260K");
    ck_assert_str_eq(choice_text(j), golden);
    ck_assert_str_eq(
        cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0), "finish_reason")
            ->valuestring,
        "length");
    check_usage(j, 60);
    check_timings(j);
    cJSON_Delete(j);

    /* token-id prompt (BOS + "Once upon a time") gives the same text */
    j = ts_post_json(&s, "/v1/completions",
                     "{\"prompt\":[1,403,407,261,378],\"max_tokens\":60,\"temperature\":0}", &st);
    ck_assert_int_eq(st, 200);
    ck_assert_str_eq(choice_text(j), golden);
    cJSON_Delete(j);

    /* logprobs: one entry per token, top-3 alternatives, the sampled one first */
    j = ts_post_json(&s, "/v1/completions",
                     "{\"prompt\":\"" GOLDEN_PROMPT "\",\"max_tokens\":8,\"temperature\":0,\"logprobs\":3}",
                     &st);
    ck_assert_int_eq(st, 200);
    const cJSON *lp =
        cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0), "logprobs");
    ck_assert_int_eq(cJSON_GetArraySize(cJSON_GetObjectItem(lp, "tokens")), 8);
    ck_assert_int_eq(cJSON_GetArraySize(cJSON_GetObjectItem(lp, "token_logprobs")), 8);
    const cJSON *top0 = cJSON_GetArrayItem(cJSON_GetObjectItem(lp, "top_logprobs"), 0);
    ck_assert_int_eq(cJSON_GetArraySize(top0), 3);
    ck_assert(cJSON_GetArrayItem(cJSON_GetObjectItem(lp, "token_logprobs"), 0)->valuedouble <= 0);
    cJSON_Delete(j);

    /* stop string: the text ends before it */
    j = ts_post_json(
        &s, "/v1/completions",
        "{\"prompt\":\"" GOLDEN_PROMPT "\",\"max_tokens\":60,\"temperature\":0,\"stop\":[\"Lily\"]}", &st);
    ck_assert_int_eq(st, 200);
    ck_assert_str_eq(choice_text(j), ", there was a little girl named ");
    ck_assert_str_eq(
        cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0), "finish_reason")
            ->valuestring,
        "stop");
    cJSON_Delete(j);

    /* chat (ChatML template forced: stories260K has none) */
    j = ts_post_json(
        &s, "/v1/chat/completions",
        "{\"messages\":[{\"role\":\"system\",\"content\":\"Be kind.\"},{\"role\":\"user\",\"content\":"
        "[{\"type\":\"text\",\"text\":\"Tell a story.\"}]}],\"max_completion_tokens\":20,\"temperature\":0}",
        &st);
    ck_assert_int_eq(st, 200);
    ck_assert_str_eq(cJSON_GetObjectItem(j, "object")->valuestring, "chat.completion");
    const cJSON *msg =
        cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0), "message");
    ck_assert_str_eq(cJSON_GetObjectItem(msg, "role")->valuestring, "assistant");
    ck_assert(strlen(cJSON_GetObjectItem(msg, "content")->valuestring) > 0);
    check_usage(j, 20);
    check_timings(j);
    cJSON_Delete(j);

    /* the chat prompt is the ChatML rendering (checked through /tokenize) */
    j = ts_post_json(&s, "/tokenize", "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}]}", &st);
    ck_assert_int_eq(st, 200);
    cJSON *j2 = ts_post_json(&s, "/tokenize",
                             "{\"prompt\":\"<|im_start|>user\\nHi<|im_end|>\\n<|im_start|>assistant\\n\","
                             "\"add_special_tokens\":false}",
                             &st);
    ck_assert(cJSON_Compare(cJSON_GetObjectItem(j, "tokens"), cJSON_GetObjectItem(j2, "tokens"), true));
    cJSON_Delete(j);
    cJSON_Delete(j2);
    free(golden);
    ts_stop_ok(&s);
}
END_TEST

/* Every logprobs / top_logprobs value 0..20 in both APIs: the right number
 * of alternatives per token, each a finite log-probability. 0 (and chat's
 * bare "logprobs": true) once corrupted the engine thread's stack. */
static void check_lp_entry(const cJSON *e, int n_top)
{
    const cJSON *lp = cJSON_GetObjectItem(e, "logprob");
    ck_assert(cJSON_IsNumber(lp) && lp->valuedouble <= 0);
    const cJSON *top = cJSON_GetObjectItem(e, "top_logprobs");
    ck_assert_int_eq(cJSON_GetArraySize(top), n_top);
    const cJSON *t;
    cJSON_ArrayForEach(t, top) ck_assert(cJSON_GetObjectItem(t, "logprob")->valuedouble <= 0);
}

START_TEST(test_logprobs_every_count)
{
    ts_server s;
    const char *args[] = {"--chat-template", "chatml", NULL};
    ck_assert(ts_start(&s, args));
    for (int n = 0; n <= 20; n++) {
        char body[256];
        long st;
        snprintf(body, sizeof body,
                 "{\"prompt\":\"" GOLDEN_PROMPT "\",\"max_tokens\":3,\"temperature\":0,\"logprobs\":%d}", n);
        cJSON *j = ts_post_json(&s, "/v1/completions", body, &st);
        ck_assert_int_eq(st, 200);
        const cJSON *lp = cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0), "logprobs");
        ck_assert_int_eq(cJSON_GetArraySize(cJSON_GetObjectItem(lp, "token_logprobs")), 3);
        const cJSON *top;
        /* a dict keyed by token text: ids that decode alike share a key */
        cJSON_ArrayForEach(top, cJSON_GetObjectItem(lp, "top_logprobs"))
            ck_assert_msg(cJSON_GetArraySize(top) <= n && (n == 0 || cJSON_GetArraySize(top) > 0),
                          "completions logprobs %d: %d alternatives", n, cJSON_GetArraySize(top));
        cJSON_Delete(j);

        /* chat: n = 0 is the common bare form, "logprobs": true alone */
        if (n == 0)
            snprintf(body, sizeof body,
                     "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],\"max_tokens\":3,"
                     "\"temperature\":0,\"logprobs\":true}");
        else
            snprintf(body, sizeof body,
                     "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],\"max_tokens\":3,"
                     "\"temperature\":0,\"logprobs\":true,\"top_logprobs\":%d}", n);
        j = ts_post_json(&s, "/v1/chat/completions", body, &st);
        ck_assert_int_eq(st, 200);
        const cJSON *content = cJSON_GetObjectItem(
            cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0), "logprobs"), "content");
        ck_assert_int_eq(cJSON_GetArraySize(content),
                         cJSON_GetObjectItem(cJSON_GetObjectItem(j, "usage"), "completion_tokens")->valueint);
        ck_assert_int_gt(cJSON_GetArraySize(content), 0);
        const cJSON *e;
        cJSON_ArrayForEach(e, content) check_lp_entry(e, n);
        cJSON_Delete(j);
    }
    ts_stop_ok(&s);
}
END_TEST

START_TEST(test_aux_endpoints)
{
    ts_server s;
    ck_assert(ts_start(&s, NULL));
    ts_resp r = ts_request(&s, "GET", "/health", NULL, 0, NULL);
    ck_assert_int_eq(r.status, 200);
    ts_resp_free(&r);
    r = ts_request(&s, "GET", "/v1/models", NULL, 0, NULL);
    ck_assert_int_eq(r.status, 200);
    cJSON *j = cJSON_Parse(r.body);
    ck_assert_str_eq(cJSON_GetObjectItem(j, "object")->valuestring, "list");
    const cJSON *m = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "data"), 0);
    ck_assert_str_eq(cJSON_GetObjectItem(m, "id")->valuestring, "stories260K");
    ck_assert_int_eq(cJSON_GetObjectItem(m, "max_model_len")->valueint, 512);
    cJSON_Delete(j);
    ts_resp_free(&r);
    r = ts_request(&s, "GET", "/v1/models/stories260K", NULL, 0, NULL);
    ck_assert_int_eq(r.status, 200);
    ts_resp_free(&r);
    long st;
    j = ts_post_json(&s, "/tokenize", "{\"prompt\":\"" GOLDEN_PROMPT "\"}", &st);
    ck_assert_int_eq(st, 200);
    cJSON *want = cJSON_Parse("[1,403,407,261,378]");
    ck_assert(cJSON_Compare(cJSON_GetObjectItem(j, "tokens"), want, true));
    ck_assert_int_eq(cJSON_GetObjectItem(j, "count")->valueint, 5);
    cJSON_Delete(want);
    cJSON_Delete(j);
    j = ts_post_json(&s, "/detokenize", "{\"tokens\":[403,407,261,378]}", &st);
    ck_assert_int_eq(st, 200);
    ck_assert_str_eq(cJSON_GetObjectItem(j, "prompt")->valuestring, GOLDEN_PROMPT);
    cJSON_Delete(j);
    /* chat without a template: a clear 400 */
    j = ts_post_json(&s, "/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}",
                     &st);
    ck_assert_int_eq(st, 400);
    const cJSON *e = cJSON_GetObjectItem(j, "error");
    ck_assert_str_eq(cJSON_GetObjectItem(e, "code")->valuestring, "chat_template_missing");
    ck_assert(strstr(cJSON_GetObjectItem(e, "message")->valuestring, "--chat-template") != NULL);
    cJSON_Delete(j);
    ts_stop_ok(&s);
}
END_TEST

/* Stream a request and compare with the non-streamed text. */
static void check_stream_equal(ts_server *s, const char *path, const char *base_json, bool chat)
{
    char body[1024];
    snprintf(body, sizeof body, "{%s}", base_json);
    long st;
    cJSON *j = ts_post_json(s, path, body, &st);
    ck_assert_int_eq(st, 200);
    const char *want = choice_text(j);
    snprintf(body, sizeof body, "{%s,\"stream\":true,\"stream_options\":{\"include_usage\":true}}",
             base_json);
    ts_resp r = ts_request(s, "POST", path, body, -1, NULL);
    ck_assert_int_eq(r.status, 200);
    ck_assert_str_eq(r.ctype, "text/event-stream");
    char *text;
    int n;
    cJSON *last, *first;
    ck_assert_msg(ts_sse_parse(r.body, &text, &n, &last, &first), "bad SSE stream: %s", r.body);
    ck_assert_str_eq(text, want);
    ck_assert_int_gt(n, 3);
    /* the usage chunk comes last: empty choices, usage, timings */
    ck_assert_int_eq(cJSON_GetArraySize(cJSON_GetObjectItem(last, "choices")), 0);
    check_usage(last, cJSON_GetObjectItem(cJSON_GetObjectItem(j, "usage"), "completion_tokens")->valueint);
    check_timings(last);
    if (chat) {
        ck_assert_str_eq(cJSON_GetObjectItem(first, "object")->valuestring, "chat.completion.chunk");
        const cJSON *d =
            cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(first, "choices"), 0), "delta");
        ck_assert_str_eq(cJSON_GetObjectItem(d, "role")->valuestring, "assistant");
    }
    free(text);
    cJSON_Delete(last);
    cJSON_Delete(first);
    ts_resp_free(&r);
    /* without include_usage: the finish chunk is last and carries timings */
    snprintf(body, sizeof body, "{%s,\"stream\":true}", base_json);
    r = ts_request(s, "POST", path, body, -1, NULL);
    ck_assert(ts_sse_parse(r.body, &text, &n, &last, &first));
    ck_assert_str_eq(text, want);
    const cJSON *fin =
        cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(last, "choices"), 0), "finish_reason");
    ck_assert(cJSON_IsString(fin));
    check_timings(last);
    free(text);
    cJSON_Delete(last);
    cJSON_Delete(first);
    ts_resp_free(&r);
    cJSON_Delete(j);
}

START_TEST(test_stream_equals_nonstream)
{
    ts_server s;
    const char *args[] = {"--chat-template", "llama-2", NULL};
    ck_assert(ts_start(&s, args));
    check_stream_equal(&s, "/v1/completions",
                       "\"prompt\":\"" GOLDEN_PROMPT "\",\"max_tokens\":60,\"temperature\":0", false);
    check_stream_equal(&s, "/v1/completions",
                       "\"prompt\":\"Lily and Tim went to the park\",\"max_tokens\":100,\"temperature\":0",
                       false);
    check_stream_equal(
        &s, "/v1/chat/completions",
        "\"messages\":[{\"role\":\"user\",\"content\":\"Once upon a time\"}],\"max_tokens\":40,"
        "\"temperature\":0",
        true);
    /* seeded sampling is reproducible too */
    check_stream_equal(
        &s, "/v1/completions",
        "\"prompt\":\"The cat\",\"max_tokens\":40,\"temperature\":0.8,\"top_p\":0.9,\"seed\":7", false);
    ts_stop_ok(&s);
}
END_TEST

#define N_PROMPTS 8
#define N_CLIENTS 64

static const char *const k_prompts[N_PROMPTS] = {
    "Once upon a time",   "Lily and Tim went to the park", "The cat sat",    "One day, a little boy",
    "Tom had a red ball", "The sun was shining",           "Sara wanted to", "There was a big dog",
};

typedef struct {
    ts_resp r;
    struct curl_slist *h;
    char body[256];
    bool stream;
} job;

static size_t job_write(char *p, size_t sz, size_t nm, void *user)
{
    ts_resp *r = user;
    size_t n = sz * nm;
    r->body = realloc(r->body, r->len + n + 1);
    memcpy(r->body + r->len, p, n);
    r->len += n;
    r->body[r->len] = '\0';
    return n;
}

START_TEST(test_concurrent_clients)
{
    ts_server s;
    ck_assert(ts_start(&s, NULL));
    char *alone[N_PROMPTS];
    for (int i = 0; i < N_PROMPTS; i++) {
        char body[256];
        snprintf(body, sizeof body,
                 "{\"prompt\":\"%s\",\"max_tokens\":48,\"temperature\":0,\"ignore_eos\":true}", k_prompts[i]);
        long st;
        cJSON *j = ts_post_json(&s, "/v1/completions", body, &st);
        ck_assert_int_eq(st, 200);
        alone[i] = strdup(choice_text(j));
        cJSON_Delete(j);
    }
    CURLM *multi = curl_multi_init();
    static job jobs[N_CLIENTS];
    CURL *easy[N_CLIENTS];
    char url[128];
    snprintf(url, sizeof url, "%s/v1/completions", s.base);
    for (int i = 0; i < N_CLIENTS; i++) {
        job *jb = &jobs[i];
        memset(jb, 0, sizeof *jb);
        jb->r.body = calloc(1, 1);
        jb->stream = i % 2 == 1;
        snprintf(jb->body, sizeof jb->body,
                 "{\"prompt\":\"%s\",\"max_tokens\":48,\"temperature\":0,\"ignore_eos\":true,\"stream\":%s}",
                 k_prompts[i % N_PROMPTS], jb->stream ? "true" : "false");
        jb->h = curl_slist_append(NULL, "Content-Type: application/json");
        CURL *c = curl_easy_init();
        curl_easy_setopt(c, CURLOPT_URL, url);
        curl_easy_setopt(c, CURLOPT_HTTPHEADER, jb->h);
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, jb->body);
        curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, job_write);
        curl_easy_setopt(c, CURLOPT_WRITEDATA, &jb->r);
        curl_easy_setopt(c, CURLOPT_TIMEOUT, 240L);
        curl_easy_setopt(c, CURLOPT_NOPROXY, "*");
        curl_multi_add_handle(multi, c);
        easy[i] = c;
    }
    int running = 1;
    while (running) {
        curl_multi_perform(multi, &running);
        if (running)
            curl_multi_poll(multi, NULL, 0, 200, NULL);
    }
    int ok = 0;
    for (int i = 0; i < N_CLIENTS; i++) {
        long code = 0;
        curl_easy_getinfo(easy[i], CURLINFO_RESPONSE_CODE, &code);
        ck_assert_msg(code == 200, "client %d: HTTP %ld", i, code);
        char *text = NULL;
        if (jobs[i].stream) {
            int n;
            cJSON *last;
            ck_assert(ts_sse_parse(jobs[i].r.body, &text, &n, &last, NULL));
            cJSON_Delete(last);
        } else {
            cJSON *j = cJSON_Parse(jobs[i].r.body);
            text = strdup(choice_text(j));
            cJSON_Delete(j);
        }
        ck_assert_msg(strcmp(text, alone[i % N_PROMPTS]) == 0, "client %d (%s) got '%s', alone '%s'", i,
                      jobs[i].stream ? "stream" : "plain", text, alone[i % N_PROMPTS]);
        ok++;
        free(text);
        curl_multi_remove_handle(multi, easy[i]);
        curl_easy_cleanup(easy[i]);
        curl_slist_free_all(jobs[i].h);
        ts_resp_free(&jobs[i].r);
    }
    curl_multi_cleanup(multi);
    ck_assert_int_eq(ok, N_CLIENTS);
    ck_assert(ts_wait_engine(&s, 0, 0, true, 5.0));
    for (int i = 0; i < N_PROMPTS; i++)
        free(alone[i]);
    ts_stop_ok(&s);
}
END_TEST

/* Many connections, few threads: 1000 idle keep-alive sockets and 200
 * concurrent streams are served by the fixed pool of event-loop threads. */
START_TEST(test_many_connections)
{
    struct rlimit rl;
    getrlimit(RLIMIT_NOFILE, &rl);
    rl.rlim_cur = rl.rlim_max > 4096 ? 4096 : rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
    int n_idle = rl.rlim_cur >= 1500 ? 1000 : (int)rl.rlim_cur / 3;
    enum { N_STREAM = 200 };
    ts_server s;
    ck_assert(ts_start(&s, NULL));
    int *idle = malloc(sizeof(int) * (size_t)n_idle);
    for (int i = 0; i < n_idle; i++) {
        idle[i] = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in a = {.sin_family = AF_INET,
                                .sin_port = htons((uint16_t)s.port),
                                .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        ck_assert_msg(connect(idle[i], (struct sockaddr *)&a, sizeof a) == 0, "connect %d", i);
    }
    int fds[N_STREAM];
    char *acc[N_STREAM] = {0};
    size_t len[N_STREAM] = {0};
    for (int i = 0; i < N_STREAM; i++) {
        fds[i] = ts_raw_post(
            &s, "/v1/completions",
            "{\"prompt\":\"Once upon a time\",\"max_tokens\":32,\"ignore_eos\":true,\"stream\":true}");
        ck_assert_int_ge(fds[i], 0);
    }
    /* thread count of the server while everything is open */
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)s.pid);
    FILE *f = fopen(path, "r");
    int threads = -1;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "Threads: %d", &threads) == 1)
            break;
    if (f)
        fclose(f);
    printf("many connections: %d idle + %d streaming, server threads %d\n", n_idle, N_STREAM, threads);
    ck_assert_int_gt(threads, 0);
    ck_assert_int_lt(threads, 40);
    for (int i = 0; i < N_STREAM; i++) {
        ck_assert_msg(ts_raw_read_until(fds[i], "data: [DONE]", 120000, &acc[i], &len[i]),
                      "stream %d incomplete", i);
        close(fds[i]);
        free(acc[i]);
    }
    long st;
    cJSON *j = ts_post_json(&s, "/v1/completions", "{\"prompt\":\"Hi\",\"max_tokens\":4}", &st);
    ck_assert_int_eq(st, 200);
    cJSON_Delete(j);
    for (int i = 0; i < n_idle; i++)
        close(idle[i]);
    free(idle);
    ts_stop_ok(&s);
}
END_TEST

START_TEST(test_metrics_exposition)
{
    ts_server s;
    ck_assert(ts_start(&s, NULL));
    char err[512];
    char *m = ts_metrics(&s);
    ck_assert_msg(prom_validate(m, err, sizeof err), "fresh /metrics invalid: %s", err);
    free(m);
    for (int i = 0; i < 3; i++) {
        long st;
        cJSON *j = ts_post_json(&s, "/v1/completions",
                                "{\"prompt\":\"Hello\",\"max_tokens\":10,\"ignore_eos\":true}", &st);
        ck_assert_int_eq(st, 200);
        cJSON_Delete(j);
    }
    ts_resp r =
        ts_request(&s, "POST", "/v1/completions",
                   "{\"prompt\":\"Hello\",\"max_tokens\":10,\"ignore_eos\":true,\"stream\":true}", -1, NULL);
    ck_assert_int_eq(r.status, 200);
    ts_resp_free(&r);
    r = ts_request(&s, "POST", "/v1/completions", "{\"prompt\":\"\"}", -1, NULL);
    ck_assert_int_eq(r.status, 400);
    ts_resp_free(&r);
    /* engine counters move one step after the last response went out */
    ck_assert(ts_wait_metric(&s, "inferd:request_success_total{finished_reason=\"length\"}", 4, 5.0));
    m = ts_metrics(&s);
    ck_assert_msg(prom_validate(m, err, sizeof err), "/metrics invalid: %s\n%s", err, m);
    double v;
    ck_assert(prom_value(m, "inferd:request_success_total{finished_reason=\"length\"}", &v) && v == 4);
    ck_assert(prom_value(m, "inferd:generation_tokens_total", &v) && v == 40);
    ck_assert(prom_value(m, "inferd:time_to_first_token_seconds_count", &v) && v == 4);
    ck_assert(prom_value(m, "inferd:request_generation_tokens_bucket{le=\"10.0\"}", &v) && v == 4);
    ck_assert(prom_value(m, "inferd:request_generation_tokens_sum", &v) && v == 40);
    ck_assert(prom_value(m, "inferd:inter_token_latency_seconds_count", &v) && v == 36);
    ck_assert(prom_value(m, "inferd:http_requests_total{code=\"400\"}", &v) && v == 1);
    ck_assert(prom_value(m, "inferd:http_requests_total{code=\"200\"}", &v) && v >= 5);
    ck_assert(prom_value(m, "inferd:num_requests_running", &v) && v == 0);
    ck_assert(prom_value(m, "inferd:kv_cache_usage_perc", &v) && v == 0);
    ck_assert(strstr(m, "# TYPE inferd:e2e_request_latency_seconds histogram\n") != NULL);
    /* promtool, when installed, must agree */
    if (system("command -v promtool >/dev/null 2>&1") == 0) {
        char *path = test_write_temp("inferd-metrics", m, strlen(m));
        char cmd[512];
        snprintf(cmd, sizeof cmd, "promtool check metrics < %s >/dev/null 2>&1", path);
        ck_assert_msg(system(cmd) == 0, "promtool rejects /metrics");
        unlink(path);
        inferd_free(path);
    }
    free(m);
    ts_stop_ok(&s);
}
END_TEST

START_TEST(test_config_file)
{
    char *model = test_fixture_path("models/stories260K");
    if (!model)
        test_skip("fixtures absent");
    char json[1024];
    snprintf(json, sizeof json,
             "{\"model\": \"%s\", \"served_model_name\": \"from-config\", \"port\": 1, \"chat-template\": "
             "\"llama-2\","
             " \"max-num-seqs\": 8, \"enable-prefix-caching\": false, \"request-timeout\": 30}",
             model);
    char *cfg = test_write_temp("inferd-serve-cfg", json, strlen(json));
    const char *args[] = {"--config", cfg, NULL}; /* --port from ts_start overrides "port": 1 */
    ts_server s;
    ck_assert(ts_start(&s, args));
    ts_resp r = ts_request(&s, "GET", "/v1/models", NULL, 0, NULL);
    ck_assert(strstr(r.body, "\"id\":\"from-config\"") != NULL);
    ts_resp_free(&r);
    long st;
    cJSON *j =
        ts_post_json(&s, "/v1/chat/completions",
                     "{\"model\":\"from-config\",\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],"
                     "\"max_tokens\":5}",
                     &st);
    ck_assert_int_eq(st, 200);
    cJSON_Delete(j);
    ts_stop_ok(&s);
    /* usage errors exit 2 */
    const char *bin = test_inferd_bin();
    char *out, *errs;
    int code;
    char *const bad1[] = {(char *)bin, "serve", "--model", model, "--no-such-flag", NULL};
    ck_assert(test_run_cmd(bad1, &out, &errs, &code));
    ck_assert_int_eq(code, 2);
    ck_assert(strstr(errs, "no-such-flag") != NULL);
    inferd_free(out);
    inferd_free(errs);
    const char *badcfg = "{\"model\": \"x\", \"max-num-seqz\": 3}";
    char *cfg2 = test_write_temp("inferd-serve-cfg", badcfg, strlen(badcfg));
    char *const bad2[] = {(char *)bin, "serve", "--config", cfg2, NULL};
    ck_assert(test_run_cmd(bad2, &out, &errs, &code));
    ck_assert_int_eq(code, 2);
    ck_assert(strstr(errs, "max-num-seqz") != NULL);
    inferd_free(out);
    inferd_free(errs);
    char *const help[] = {(char *)bin, "serve", "--help", NULL};
    ck_assert(test_run_cmd(help, &out, &errs, &code));
    ck_assert_int_eq(code, 0);
    ck_assert(strstr(out, "--max-queued-requests") != NULL);
    inferd_free(out);
    inferd_free(errs);
    unlink(cfg);
    unlink(cfg2);
    inferd_free(cfg);
    inferd_free(cfg2);
    inferd_free(model);
}
END_TEST

int main(void)
{
    ts_require_server();
    Suite *s = suite_create("server");
    TCase *tc = tcase_create("blackbox");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_completions_and_chat);
    tcase_add_test(tc, test_logprobs_every_count);
    tcase_add_test(tc, test_aux_endpoints);
    tcase_add_test(tc, test_stream_equals_nonstream);
    tcase_add_test(tc, test_concurrent_clients);
    tcase_add_test(tc, test_many_connections);
    tcase_add_test(tc, test_metrics_exposition);
    tcase_add_test(tc, test_config_file);
    suite_add_tcase(s, tc);
    return test_run_suite(s);
}
