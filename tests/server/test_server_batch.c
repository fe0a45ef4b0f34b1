/* tests/server/test_server_batch.c: black-box tests of the request shapes
 * that give several choices or other output shapes, on `inferd serve` with
 * stories260K (CPU): batched completions prompts (a 3-prompt array equals 3
 * single requests, text by text and usage summed; streamed chunks carry
 * their index and rebuild the same texts; one bad prompt refuses the whole
 * request before the engine sees any; a batch the queue cannot take is a
 * 429 that leaves nothing running; a client that hangs up aborts every
 * choice), echo (the prompt, then the same continuation; with logprobs the
 * prompt tokens' entries first), and /v1/responses
 * (the chat template path: its text equals chat completions' for the same
 * messages; the stream's typed events rebuild the same text).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/buf.h"
#include "common/util.h"
#include "test_util.h"
#include "ts_client.h"

#define N_PROMPTS 3
/* two text prompts and a token prompt (BOS, then two stories260K ids) */
static const char *const k_prompts[N_PROMPTS] = {"\"Once upon a time\"", "\"The little dog\"", "[1,403,407]"};

static cJSON *item(const cJSON *o, const char *k)
{
    return cJSON_GetObjectItemCaseSensitive(o, k);
}

static int usage_of(const cJSON *j, const char *k)
{
    const cJSON *v = item(item(j, "usage"), k);
    ck_assert_msg(cJSON_IsNumber(v), "usage.%s missing", k);
    return v->valueint;
}



/* One completion per prompt, alone: its text (heap) and usage. */
typedef struct {
    char *text;
    const char *finish;
    int prompt_tokens, completion_tokens;
} single;

static void run_singles(const ts_server *s, const char *extra, single out[N_PROMPTS])
{
    char body[512];
    for (int i = 0; i < N_PROMPTS; i++) {
        snprintf(body, sizeof body, "{\"prompt\":%s%s}", k_prompts[i], extra);
        cJSON *j = ts_post_ok(s, "/v1/completions", body);
        const cJSON *c = cJSON_GetArrayItem(item(j, "choices"), 0);
        out[i].text = strdup(item(c, "text")->valuestring);
        out[i].finish = strcmp(item(c, "finish_reason")->valuestring, "stop") == 0 ? "stop" : "length";
        out[i].prompt_tokens = usage_of(j, "prompt_tokens");
        out[i].completion_tokens = usage_of(j, "completion_tokens");
        cJSON_Delete(j);
    }
}

static void free_singles(single s[N_PROMPTS])
{
    for (int i = 0; i < N_PROMPTS; i++)
        free(s[i].text);
}

/* The batched body: {"prompt":[p0,p1,p2]<extra>}. */
static void batch_body(char *body, size_t cap, const char *extra)
{
    snprintf(body, cap, "{\"prompt\":[%s,%s,%s]%s}", k_prompts[0], k_prompts[1], k_prompts[2], extra);
}

START_TEST(test_batch_equals_singles)
{
    ts_server s;
    ck_assert(ts_start(&s, NULL));
    /* greedy, and seeded sampling: each choice is the request it would be alone */
    const char *const extras[] = {",\"max_tokens\":24,\"temperature\":0",
                                  ",\"max_tokens\":24,\"temperature\":0.9,\"seed\":1234"};
    for (size_t e = 0; e < INFERD_ARRAY_LEN(extras); e++) {
        single one[N_PROMPTS];
        run_singles(&s, extras[e], one);
        char body[512];
        batch_body(body, sizeof body, extras[e]);
        double before = ts_metric(&s, "inferd:prompt_tokens_total");
        cJSON *j = ts_post_ok(&s, "/v1/completions", body);
        const cJSON *ch = item(j, "choices");
        ck_assert_int_eq(cJSON_GetArraySize(ch), N_PROMPTS);
        int sum_p = 0, sum_c = 0;
        for (int i = 0; i < N_PROMPTS; i++) {
            const cJSON *c = cJSON_GetArrayItem(ch, i);
            ck_assert_int_eq(item(c, "index")->valueint, i);
            ck_assert_msg(!strcmp(item(c, "text")->valuestring, one[i].text),
                          "extra %zu choice %d: '%s' != '%s'", e, i, item(c, "text")->valuestring,
                          one[i].text);
            ck_assert_str_eq(item(c, "finish_reason")->valuestring, one[i].finish);
            sum_p += one[i].prompt_tokens;
            sum_c += one[i].completion_tokens;
        }
        ck_assert_int_eq(usage_of(j, "prompt_tokens"), sum_p);
        ck_assert_int_eq(usage_of(j, "completion_tokens"), sum_c);
        ck_assert_int_eq(usage_of(j, "total_tokens"), sum_p + sum_c);
        /* the engine ran each prompt once */
        ck_assert(ts_wait_metric(&s, "inferd:prompt_tokens_total", before + sum_p, 5.0));
        cJSON_Delete(j);
        free_singles(one);
    }
    /* a one-element batch is the plain request */
    cJSON *a = ts_post_ok(&s, "/v1/completions", "{\"prompt\":[\"Hi\"],\"max_tokens\":8,\"temperature\":0}");
    cJSON *b = ts_post_ok(&s, "/v1/completions", "{\"prompt\":\"Hi\",\"max_tokens\":8,\"temperature\":0}");
    ck_assert_str_eq(item(cJSON_GetArrayItem(item(a, "choices"), 0), "text")->valuestring,
                     item(cJSON_GetArrayItem(item(b, "choices"), 0), "text")->valuestring);
    cJSON_Delete(a);
    cJSON_Delete(b);
    ck_assert(ts_wait_engine(&s, 0, 0, true, 5.0));
    ts_stop_ok(&s);
}
END_TEST

/* Streamed batch: every chunk names its choice; per index the chunks
 * rebuild the non-streamed text, one finish chunk each, then one usage
 * chunk with the sums. With echo the first chunk of each choice is its
 * prompt. */
static void check_stream(const ts_server *s, bool echo, single one[N_PROMPTS])
{
    char body[512];
    batch_body(body, sizeof body,
               echo ? ",\"max_tokens\":24,\"temperature\":0,\"echo\":true,\"stream\":true,"
                      "\"stream_options\":{\"include_usage\":true}"
                    : ",\"max_tokens\":24,\"temperature\":0,\"stream\":true,"
                      "\"stream_options\":{\"include_usage\":true}");
    ts_resp r = ts_request(s, "POST", "/v1/completions", body, -1, NULL);
    ck_assert_int_eq(r.status, 200);
    cJSON *ev = ts_sse_events_ok(r.body);
    inferd_buf text[N_PROMPTS] = {{0}};
    int finishes[N_PROMPTS] = {0}, chunks[N_PROMPTS] = {0}, usage_chunks = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, ev)
    {
        const cJSON *ch = item(e, "choices");
        if (cJSON_GetArraySize(ch) == 0) {
            usage_chunks++;
            int sum_p = 0, sum_c = 0;
            for (int i = 0; i < N_PROMPTS; i++) {
                sum_p += one[i].prompt_tokens;
                sum_c += one[i].completion_tokens;
            }
            ck_assert_int_eq(usage_of(e, "prompt_tokens"), sum_p);
            ck_assert_int_eq(usage_of(e, "completion_tokens"), sum_c);
            continue;
        }
        ck_assert_int_eq(cJSON_GetArraySize(ch), 1);
        const cJSON *c = cJSON_GetArrayItem(ch, 0);
        int i = item(c, "index")->valueint;
        ck_assert(i >= 0 && i < N_PROMPTS);
        ck_assert_msg(finishes[i] == 0, "choice %d: chunk after its finish", i);
        const char *t = item(c, "text")->valuestring;
        if (echo && chunks[i] == 0 && i < 2) /* text prompts echo verbatim */
            ck_assert_str_eq(t, i == 0 ? "Once upon a time" : "The little dog");
        inferd_buf_append_str(&text[i], t);
        chunks[i]++;
        if (cJSON_IsString(item(c, "finish_reason"))) {
            finishes[i]++;
            ck_assert_str_eq(item(c, "finish_reason")->valuestring, one[i].finish);
        }
    }
    ck_assert_int_eq(usage_chunks, 1);
    for (int i = 0; i < N_PROMPTS; i++) {
        inferd_buf_append_char(&text[i], '\0');
        ck_assert_int_eq(finishes[i], 1);
        ck_assert_msg(!strcmp(text[i].data, one[i].text), "choice %d streamed '%s' != '%s'", i, text[i].data,
                      one[i].text);
        inferd_buf_free(&text[i]);
    }
    cJSON_Delete(ev);
    ts_resp_free(&r);
}

START_TEST(test_batch_stream_and_echo)
{
    ts_server s;
    ck_assert(ts_start(&s, NULL));
    single one[N_PROMPTS];
    run_singles(&s, ",\"max_tokens\":24,\"temperature\":0", one);
    check_stream(&s, false, one);
    /* echo: the prompt text, then the same continuation; a token prompt
     * echoes its decoded text without the BOS */
    long st;
    cJSON *d = ts_post_json(&s, "/detokenize", "{\"tokens\":[403,407]}", &st);
    ck_assert_int_eq(st, 200);
    const char *echoed[N_PROMPTS] = {"Once upon a time", "The little dog", item(d, "prompt")->valuestring};
    char body[512];
    batch_body(body, sizeof body, ",\"max_tokens\":24,\"temperature\":0,\"echo\":true");
    cJSON *j = ts_post_ok(&s, "/v1/completions", body);
    single with_echo[N_PROMPTS];
    for (int i = 0; i < N_PROMPTS; i++) {
        const char *t = item(cJSON_GetArrayItem(item(j, "choices"), i), "text")->valuestring;
        size_t pl = strlen(echoed[i]);
        ck_assert_msg(!strncmp(t, echoed[i], pl) && !strcmp(t + pl, one[i].text), "choice %d: '%s'", i, t);
        with_echo[i] = one[i];
        with_echo[i].text = strdup(t);
    }
    ck_assert_int_eq(usage_of(j, "completion_tokens"),
                     one[0].completion_tokens + one[1].completion_tokens + one[2].completion_tokens);
    cJSON_Delete(j);
    cJSON_Delete(d);
    check_stream(&s, true, with_echo);
    free_singles(with_echo);
    free_singles(one);
    ck_assert(ts_wait_engine(&s, 0, 0, true, 5.0));
    ts_stop_ok(&s);
}
END_TEST

/* One prompt too long refuses the batch before anything reaches the
 * engine; a client hanging up on a streamed batch aborts every choice. */
START_TEST(test_batch_refusal_and_disconnect)
{
    ts_server s;
    ck_assert(ts_start(&s, NULL));
    double p0 = ts_metric(&s, "inferd:prompt_tokens_total");
    long st;
    cJSON *j =
        ts_post_json(&s, "/v1/completions", "{\"prompt\":[\"a\",\"b c d e f g\"],\"max_tokens\":508}", &st);
    ck_assert_int_eq(st, 400);
    const cJSON *err = item(j, "error");
    ck_assert_str_eq(item(err, "code")->valuestring, "context_length_exceeded");
    ck_assert_msg(strstr(item(err, "message")->valuestring, "'prompt'[1]") != NULL, "%s",
                  item(err, "message")->valuestring);
    cJSON_Delete(j);
    /* nothing reached the engine: no prompt tokens counted, nothing running */
    ck_assert(ts_wait_engine(&s, 0, 0, true, 5.0));
    double p1 = ts_metric(&s, "inferd:prompt_tokens_total");
    ck_assert_msg(p1 == p0, "prompt tokens %g -> %g after a refused batch", p0, p1);
    double aborted0 = ts_metric(&s, "inferd:request_success_total{finished_reason=\"abort\"}");
    int fd = ts_raw_post(&s, "/v1/completions",
                         "{\"prompt\":[\"Once\",\"The\",\"A\"],\"max_tokens\":500,\"ignore_eos\":true,"
                         "\"stream\":true}");
    ck_assert(fd >= 0);
    char *acc = NULL;
    size_t acc_len = 0;
    ck_assert(ts_raw_read_until(fd, "\"index\":2", 20000, &acc, &acc_len));
    close(fd);
    free(acc);
    ck_assert_msg(ts_wait_engine(&s, 0, 0, true, 10.0), "choices still running after the client left");
    ck_assert(ts_wait_metric(&s, "inferd:request_success_total{finished_reason=\"abort\"}",
                             (isnan(aborted0) ? 0 : aborted0) + 3, 5.0));
    ts_stop_ok(&s);
}
END_TEST

/* A batch the engine's queue cannot take: 429 for the whole request, and
 * the prompts already queued are aborted (nothing of it keeps running).
 * With one running sequence and a queue of 2, the 4th prompt cannot fit
 * however fast the engine schedules. */
START_TEST(test_batch_queue_full)
{
    ts_server s;
    const char *args[] = {"--max-num-seqs", "1", "--max-queued-requests", "2", NULL};
    ck_assert(ts_start(&s, args));
    ts_resp r = ts_request(
        &s, "POST", "/v1/completions",
        "{\"prompt\":[\"a\",\"b\",\"c\",\"d\",\"e\"],\"max_tokens\":200,\"ignore_eos\":true}", -1, NULL);
    ck_assert_msg(r.status == 429, "HTTP %ld: %s", r.status, r.body);
    ck_assert_str_eq(r.retry_after, "1");
    ts_resp_free(&r);
    ck_assert_msg(ts_wait_engine(&s, 0, 0, true, 10.0), "queued prompts of a refused batch still running");
    /* the server still serves a batch that fits: at once, or after the
     * Retry-After it gave (the refused batch's aborts are released by the
     * engine thread, which can lag the gauges ts_wait_engine reads; seen
     * once as a 429 on a loaded 2-core machine) */
    ts_resp again = {0};
    for (int k = 0; k < 30; k++) {
        again = ts_request(&s, "POST", "/v1/completions", "{\"prompt\":[\"a\",\"b\"],\"max_tokens\":4}", -1, NULL);
        if (again.status != 429)
            break;
        ts_resp_free(&again);
        ts_sleep_ms(100);
    }
    ck_assert_msg(again.status == 200, "HTTP %ld: %s", again.status, again.body);
    cJSON *j = cJSON_Parse(again.body);
    ts_resp_free(&again);
    ck_assert(j != NULL);
    ck_assert_int_eq(cJSON_GetArraySize(item(j, "choices")), 2);
    cJSON_Delete(j);
    ts_stop_ok(&s);
}
END_TEST

/* The text of the chat completion for the same conversation. */
static char *chat_text(const ts_server *s, const char *messages, int max_tokens)
{
    char body[1024];
    snprintf(body, sizeof body, "{\"messages\":%s,\"max_tokens\":%d,\"temperature\":0}", messages,
             max_tokens);
    cJSON *j = ts_post_ok(s, "/v1/chat/completions", body);
    char *t =
        strdup(item(item(cJSON_GetArrayItem(item(j, "choices"), 0), "message"), "content")->valuestring);
    cJSON_Delete(j);
    return t;
}

/* The Response's one output text. */
static const char *output_text(const cJSON *resp)
{
    const cJSON *msg = cJSON_GetArrayItem(item(resp, "output"), 0);
    ck_assert_str_eq(item(msg, "type")->valuestring, "message");
    return item(cJSON_GetArrayItem(item(msg, "content"), 0), "text")->valuestring;
}

/* Split "event: T\ndata: J\n\n" events; T must equal J's type. */
static cJSON *typed_events(const char *body)
{
    cJSON *arr = cJSON_CreateArray();
    const char *p = body;
    int seq = 0;
    while ((p = strstr(p, "event: ")) != NULL) {
        const char *nl = strchr(p, '\n');
        ck_assert(nl && !strncmp(nl + 1, "data: ", 6));
        const char *data = nl + 7, *end = strstr(data, "\n\n");
        ck_assert(end != NULL);
        cJSON *e = cJSON_ParseWithLength(data, (size_t)(end - data));
        ck_assert(e != NULL);
        ck_assert(!strncmp(p + 7, item(e, "type")->valuestring, (size_t)(nl - p - 7)));
        ck_assert_int_eq(item(e, "sequence_number")->valueint, seq++);
        cJSON_AddItemToArray(arr, e);
        p = end;
    }
    ck_assert_msg(strstr(body, "[DONE]") == NULL, "a responses stream has no [DONE]");
    return arr;
}

START_TEST(test_responses)
{
    ts_server s;
    const char *args[] = {"--chat-template", "chatml", NULL};
    ck_assert(ts_start(&s, args));
    const char *msgs = "[{\"role\":\"system\",\"content\":\"You tell stories.\"},"
                       "{\"role\":\"user\",\"content\":\"Tell me about a cat.\"}]";
    char *want = chat_text(&s, msgs, 20);
    /* instructions + a string input render as the same two turns */
    cJSON *j = ts_post_ok(&s, "/v1/responses",
                       "{\"instructions\":\"You tell stories.\",\"input\":\"Tell me about a cat.\","
                       "\"max_output_tokens\":20,\"temperature\":0}");
    ck_assert_str_eq(output_text(j), want);
    ck_assert_str_eq(item(j, "object")->valuestring, "response");
    ck_assert_str_eq(item(j, "status")->valuestring, "incomplete");
    ck_assert_str_eq(item(item(j, "incomplete_details"), "reason")->valuestring, "max_output_tokens");
    int in_tok = usage_of(j, "input_tokens");
    ck_assert_int_eq(usage_of(j, "output_tokens"), 20);
    ck_assert_int_eq(usage_of(j, "total_tokens"), in_tok + 20);
    ck_assert(!strncmp(item(j, "id")->valuestring, "resp_", 5));
    cJSON_Delete(j);
    /* the message-list form with typed parts, and a developer role */
    j = ts_post_ok(
        &s, "/v1/responses",
        "{\"input\":[{\"role\":\"developer\",\"content\":\"You tell stories.\"},{\"type\":\"message\","
        "\"role\":\"user\",\"content\":[{\"type\":\"input_text\",\"text\":\"Tell me about a cat.\"}]}],"
        "\"max_output_tokens\":20,\"temperature\":0,\"store\":false,\"tools\":[]}");
    ck_assert_str_eq(output_text(j), want);
    ck_assert_int_eq(usage_of(j, "input_tokens"), in_tok);
    cJSON_Delete(j);
    /* streamed: the event sequence, deltas rebuilding the same text */
    ts_resp r = ts_request(&s, "POST", "/v1/responses",
                           "{\"instructions\":\"You tell stories.\",\"input\":\"Tell me about a cat.\","
                           "\"max_output_tokens\":20,\"temperature\":0,\"stream\":true}",
                           -1, NULL);
    ck_assert_int_eq(r.status, 200);
    ck_assert_msg(!strncmp(r.ctype, "text/event-stream", 17), "%s", r.ctype);
    cJSON *ev = typed_events(r.body);
    int n = cJSON_GetArraySize(ev);
    static const char *const k_head[] = {"response.created", "response.in_progress",
                                         "response.output_item.added", "response.content_part.added"};
    static const char *const k_tail[] = {"response.output_text.done", "response.content_part.done",
                                         "response.output_item.done", "response.incomplete"};
    ck_assert_int_ge(n, 9);
    inferd_buf text = {0};
    for (int i = 0; i < n; i++) {
        const cJSON *e = cJSON_GetArrayItem(ev, i);
        const char *type = item(e, "type")->valuestring;
        if (i < 4)
            ck_assert_str_eq(type, k_head[i]);
        else if (i >= n - 4)
            ck_assert_str_eq(type, k_tail[i - (n - 4)]);
        else {
            ck_assert_str_eq(type, "response.output_text.delta");
            inferd_buf_append_str(&text, item(e, "delta")->valuestring);
        }
    }
    inferd_buf_append_char(&text, '\0');
    ck_assert_str_eq(text.data, want);
    ck_assert_str_eq(item(cJSON_GetArrayItem(ev, n - 4), "text")->valuestring, want);
    const cJSON *fin = item(cJSON_GetArrayItem(ev, n - 1), "response");
    ck_assert_str_eq(output_text(fin), want);
    ck_assert_int_eq(item(item(fin, "usage"), "output_tokens")->valueint, 20);
    inferd_buf_free(&text);
    cJSON_Delete(ev);
    ts_resp_free(&r);
    /* a turn that ends on its own completes */
    j = ts_post_ok(&s, "/v1/responses", "{\"input\":\"Hi\",\"max_output_tokens\":400,\"temperature\":0}");
    const char *status = item(j, "status")->valuestring;
    ck_assert_msg(!strcmp(status, "completed") || !strcmp(status, "incomplete"), "status %s", status);
    if (usage_of(j, "output_tokens") < 400)
        ck_assert_str_eq(status, "completed");
    cJSON_Delete(j);
    free(want);
    ck_assert(ts_wait_engine(&s, 0, 0, true, 5.0));
    ts_stop_ok(&s);
}
END_TEST

/* --- echo with logprobs ------------------------------------------------------ */

/* Append the completions logprobs object src's four arrays to acc's. */
static void lp_concat(cJSON *acc, const cJSON *src)
{
    const char *keys[] = {"tokens", "token_logprobs", "top_logprobs", "text_offset"};
    for (int k = 0; k < 4; k++) {
        cJSON *dst = item(acc, keys[k]);
        const cJSON *x;
        ck_assert_msg(cJSON_IsArray(item(src, keys[k])), "logprobs.%s missing", keys[k]);
        cJSON_ArrayForEach(x, item(src, keys[k])) cJSON_AddItemToArray(dst, cJSON_Duplicate(x, true));
    }
}

static cJSON *lp_empty(void)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddArrayToObject(o, "tokens");
    cJSON_AddArrayToObject(o, "token_logprobs");
    cJSON_AddArrayToObject(o, "top_logprobs");
    cJSON_AddArrayToObject(o, "text_offset");
    return o;
}

/* The shape of one choice's echo + logprobs object: n_prompt + n_gen
 * entries, the first with null logprob and null top, the others numbers
 * <= 0 with at most n_top alternatives, offsets monotone, the generated
 * part from echo_len on; the generated entries equal gen's (the same
 * request without echo). */
static void check_echo_lp(const cJSON *lp, int n_prompt, int n_gen, int n_top, size_t echo_len, const cJSON *gen)
{
    const cJSON *toks = item(lp, "tokens"), *lps = item(lp, "token_logprobs"), *top = item(lp, "top_logprobs"),
                *off = item(lp, "text_offset");
    ck_assert_int_eq(cJSON_GetArraySize(toks), n_prompt + n_gen);
    ck_assert_int_eq(cJSON_GetArraySize(lps), n_prompt + n_gen);
    ck_assert_int_eq(cJSON_GetArraySize(top), n_prompt + n_gen);
    ck_assert_int_eq(cJSON_GetArraySize(off), n_prompt + n_gen);
    ck_assert(cJSON_IsNull(cJSON_GetArrayItem(lps, 0)));
    ck_assert(cJSON_IsNull(cJSON_GetArrayItem(top, 0)));
    double prev = 0;
    for (int k = 0; k < n_prompt + n_gen; k++) {
        ck_assert(cJSON_IsString(cJSON_GetArrayItem(toks, k)));
        double o = cJSON_GetArrayItem(off, k)->valuedouble;
        ck_assert_msg(o >= prev, "text_offset[%d] %g < %g", k, o, prev);
        prev = o;
        if (k < n_prompt)
            ck_assert_msg(o <= (double)echo_len, "prompt offset %g past the echo (%zu)", o, echo_len);
        if (k == n_prompt)
            ck_assert_int_eq((int)o, (int)echo_len);
        if (k == 0)
            continue;
        const cJSON *v = cJSON_GetArrayItem(lps, k);
        ck_assert(cJSON_IsNumber(v) && v->valuedouble <= 0);
        ck_assert(cJSON_IsObject(cJSON_GetArrayItem(top, k)));
        ck_assert_int_le(cJSON_GetArraySize(cJSON_GetArrayItem(top, k)), n_top);
        ck_assert_int_ge(cJSON_GetArraySize(cJSON_GetArrayItem(top, k)), 1);
    }
    for (int k = 0; gen && k < n_gen; k++) {
        ck_assert_str_eq(cJSON_GetArrayItem(toks, n_prompt + k)->valuestring,
                         cJSON_GetArrayItem(item(gen, "tokens"), k)->valuestring);
        ck_assert_double_eq_tol(cJSON_GetArrayItem(lps, n_prompt + k)->valuedouble,
                                cJSON_GetArrayItem(item(gen, "token_logprobs"), k)->valuedouble, 1e-6);
    }
}

/* The same entries, value for value (streamed vs non-streamed, choice k
 * of a group vs choice 0 over the prompt part). */
static void assert_lp_equal(const cJSON *a, const cJSON *b, int n)
{
    const char *keys[] = {"tokens", "token_logprobs", "text_offset"};
    for (int k = 0; k < 3; k++)
        for (int i = 0; i < n; i++) {
            const cJSON *x = cJSON_GetArrayItem(item(a, keys[k]), i), *y = cJSON_GetArrayItem(item(b, keys[k]), i);
            ck_assert_msg(x && y, "%s[%d] missing", keys[k], i);
            if (cJSON_IsString(x))
                ck_assert_str_eq(x->valuestring, y->valuestring);
            else if (cJSON_IsNull(x))
                ck_assert(cJSON_IsNull(y));
            else
                ck_assert_double_eq_tol(x->valuedouble, y->valuedouble, 1e-6);
        }
}

/* echo + logprobs: the prompt tokens' entries (the first null), then the
 * generated ones, equal to the plain request's; streamed, the echo chunk
 * carries the prompt's entries and the chunks rebuild the same object;
 * n = 2 over a batch: each choice carries its prompt's entries. */
START_TEST(test_echo_logprobs)
{
    ts_server s;
    ck_assert(ts_start(&s, NULL));
    const char *echo = "Once upon a time";
    cJSON *plain = ts_post_ok(&s, "/v1/completions",
                           "{\"prompt\":\"Once upon a time\",\"max_tokens\":8,\"temperature\":0,\"logprobs\":2}");
    const cJSON *pc = cJSON_GetArrayItem(item(plain, "choices"), 0);
    int n_prompt = usage_of(plain, "prompt_tokens"), n_gen = usage_of(plain, "completion_tokens");
    ck_assert_int_gt(n_prompt, 2);
#define ECHO_REQ "{\"prompt\":\"Once upon a time\",\"max_tokens\":8,\"temperature\":0,\"logprobs\":2,\"echo\":true%s}"
    char body[512];
    snprintf(body, sizeof body, ECHO_REQ, "");
    cJSON *j = ts_post_ok(&s, "/v1/completions", body);
    const cJSON *c = cJSON_GetArrayItem(item(j, "choices"), 0);
    char want[256];
    snprintf(want, sizeof want, "%s%s", echo, item(pc, "text")->valuestring);
    ck_assert_str_eq(item(c, "text")->valuestring, want);
    const cJSON *lp = item(c, "logprobs");
    check_echo_lp(lp, n_prompt, n_gen, 2, strlen(echo), item(pc, "logprobs"));

    /* streamed: the first chunk is the echo with the prompt's entries */
    snprintf(body, sizeof body, ECHO_REQ, ",\"stream\":true");
    ts_resp r = ts_request(&s, "POST", "/v1/completions", body, -1, NULL);
    ck_assert_int_eq(r.status, 200);
    cJSON *ev = ts_sse_events_ok(r.body);
    cJSON *acc = lp_empty();
    const cJSON *e;
    int n = 0;
    cJSON_ArrayForEach(e, ev)
    {
        const cJSON *sc = cJSON_GetArrayItem(item(e, "choices"), 0);
        if (!sc)
            continue;
        if (n++ == 0) {
            ck_assert_str_eq(item(sc, "text")->valuestring, echo);
            ck_assert_int_eq(cJSON_GetArraySize(item(item(sc, "logprobs"), "tokens")), n_prompt);
        }
        if (cJSON_IsObject(item(sc, "logprobs")))
            lp_concat(acc, item(sc, "logprobs"));
    }
    assert_lp_equal(acc, lp, n_prompt + n_gen);
    ck_assert_int_eq(cJSON_GetArraySize(item(acc, "tokens")), n_prompt + n_gen);
    cJSON_Delete(acc);
    cJSON_Delete(ev);
    ts_resp_free(&r);

    /* a batch with n = 2: every choice has its prompt's entries, a group's
     * second choice the same as its first */
    batch_body(body, sizeof body, ",\"max_tokens\":6,\"temperature\":0,\"logprobs\":1,\"echo\":true,\"n\":2");
    cJSON *b = ts_post_ok(&s, "/v1/completions", body);
    ck_assert_int_eq(cJSON_GetArraySize(item(b, "choices")), 2 * N_PROMPTS);
    for (int p = 0; p < N_PROMPTS; p++) {
        int np = 3; /* the token prompt [1,403,407] */
        if (k_prompts[p][0] == '"') {
            snprintf(body, sizeof body, "{\"prompt\":%s}", k_prompts[p]);
            cJSON *t = ts_post_ok(&s, "/tokenize", body);
            np = cJSON_GetArraySize(item(t, "tokens"));
            cJSON_Delete(t);
        }
        const cJSON *c0 = item(cJSON_GetArrayItem(item(b, "choices"), 2 * p), "logprobs");
        const cJSON *c1 = item(cJSON_GetArrayItem(item(b, "choices"), 2 * p + 1), "logprobs");
        int ng = cJSON_GetArraySize(item(c0, "tokens")) - np;
        ck_assert_int_gt(ng, 0);
        ck_assert_int_le(ng, 6);
        ck_assert(cJSON_IsNull(cJSON_GetArrayItem(item(c0, "token_logprobs"), 0)));
        assert_lp_equal(c0, c1, np + ng); /* greedy: the same continuation too */
    }
    cJSON_Delete(b);
    cJSON_Delete(j);
    cJSON_Delete(plain);
    ck_assert(ts_wait_engine(&s, 0, 0, true, 5.0));
    ts_stop_ok(&s);
}
END_TEST

int main(void)
{
    ts_require_server();
    Suite *s = suite_create("server_batch");
    TCase *tc = tcase_create("batch");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_batch_equals_singles);
    tcase_add_test(tc, test_batch_stream_and_echo);
    tcase_add_test(tc, test_batch_refusal_and_disconnect);
    tcase_add_test(tc, test_batch_queue_full);
    tcase_add_test(tc, test_responses);
    tcase_add_test(tc, test_echo_logprobs);
    suite_add_tcase(s, tc);
    return test_run_suite(s);
}
