/* tests/fuzz/fuzz_openai.c: the OpenAI request parser (server/srv_openai.h)
 * on arbitrary request bodies: the most exposed parser (any client, no key
 * by default).
 *
 * The input is one HTTP body, handed over exactly as the HTTP layer does
 * (pointer + length, no terminating NUL: a read past the end is an ASan
 * error). Each input goes through the /v1/completions, /v1/chat/completions,
 * /tokenize and /detokenize parsers. Accepted requests are checked against
 * the contract the engine relies on (sampling_params_validate passes,
 * logprobs in [-1, 20], token ids inside the vocab, text valid UTF-8, stop
 * strings owned by the request), chat messages are rendered with every
 * template family, and the response builders get the prompt text as output
 * text: their bodies must be valid JSON. Rejected requests must render a
 * valid JSON error body with a 4xx status.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "fuzz_util.h"
#include "server/srv_chat.h"
#include "server/srv_errors.h"
#include "server/srv_openai.h"
#include "server/srv_responses.h"

/* Llama-3's vocab size: ids above 65535 are reachable. */
static const srv_parse_limits k_lim = {"m", 128256, NULL};

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    fuzz_quiet();
    return 0;
}

static void check_json(char *body, const char *what)
{
    FUZZ_ASSERT(body != NULL, "%s: NULL body", what);
    size_t n = strlen(body);
    FUZZ_ASSERT(fuzz_utf8_valid(body, n), "%s: body is not valid UTF-8", what);
    cJSON *j = cJSON_ParseWithLength(body, n);
    FUZZ_ASSERT(j != NULL, "%s: body is not valid JSON: %.200s", what, body);
    cJSON_Delete(j);
    inferd_free(body);
}

static void check_error(const srv_error *e, const char *what)
{
    FUZZ_ASSERT(e->kind != SRV_ERR_NONE && e->message[0], "%s: rejected without an error", what);
    FUZZ_ASSERT(memchr(e->param, 0, sizeof e->param) && memchr(e->message, 0, sizeof e->message),
                "%s: unterminated error", what);
    int status = 0;
    check_json(srv_error_render(e, &status), what);
    FUZZ_ASSERT(status >= 400 && status < 500, "%s: status %d for a bad body", what, status);
}

static void check_msgs(const srv_chat_msg *m, int n, bool need_one)
{
    FUZZ_ASSERT(n >= 0 && (n > 0 || !need_one) && (n == 0 || m), "n_msgs %d", n);
    for (int i = 0; i < n; i++) {
        FUZZ_ASSERT(m[i].role >= SRV_ROLE_SYSTEM && m[i].role < SRV_ROLE_COUNT, "role %d", (int)m[i].role);
        FUZZ_ASSERT(m[i].content && fuzz_utf8_valid(m[i].content, strlen(m[i].content)), "msg %d content", i);
    }
    /* One built-in family per input (rendering runs jinja2 in Python:
     * fuzz_chat covers the families in depth). */
    {
        int f = n % SRV_CHAT_FAMILY_COUNT;
        char *out = NULL;
        srv_error e;
        memset(&e, 0, sizeof e);
        if (srv_chat_render((srv_chat_family)f, m, n, "<s>", "</s>", &out, &e)) {
            FUZZ_ASSERT(out && fuzz_utf8_valid(out, strlen(out)), "render %d: invalid output", f);
            inferd_free(out);
        } else {
            check_error(&e, "srv_chat_render");
        }
    }
}

static void check_request(const srv_request *r)
{
    sampling_params chk = r->sp;
    chk.max_tokens = r->max_tokens > 0 ? (int32_t)r->max_tokens : INT32_MAX;
    FUZZ_ASSERT(sampling_params_validate(&chk, k_lim.vocab_size, NULL) == INFERD_OK, "accepted sampling invalid");
    FUZZ_ASSERT(r->sp.logprobs >= -1 && r->sp.logprobs <= SAMPLING_MAX_LOGPROBS, "logprobs %d", r->sp.logprobs);
    FUZZ_ASSERT(r->sp.n_stop >= 0 && r->sp.n_stop <= SAMPLING_MAX_STOP, "n_stop %d", r->sp.n_stop);
    for (int i = 0; i < r->sp.n_stop; i++)
        FUZZ_ASSERT(r->sp.stop[i] == r->stops[i], "stop %d not owned", i);
    FUZZ_ASSERT(r->max_tokens >= 0, "max_tokens %lld", (long long)r->max_tokens);
    if (r->api == SRV_API_COMPLETIONS) {
        FUZZ_ASSERT(r->n_prompts >= 1 && r->n_prompts <= SRV_MAX_PROMPTS && r->prompts, "n_prompts %d",
                    r->n_prompts);
        for (int k = 0; k < r->n_prompts; k++) {
            const srv_prompt *p = &r->prompts[k];
            FUZZ_ASSERT((p->text != NULL) != (p->ids != NULL), "prompt %d: text %p ids %p", k,
                        (void *)p->text, (void *)p->ids);
            if (p->text) {
                FUZZ_ASSERT(p->len > 0 && fuzz_utf8_valid(p->text, p->len), "prompt %d text", k);
            } else {
                FUZZ_ASSERT(p->n_ids > 0, "prompt %d n_ids %d", k, p->n_ids);
                for (int i = 0; i < p->n_ids; i++)
                    FUZZ_ASSERT(p->ids[i] >= 0 && p->ids[i] < k_lim.vocab_size, "prompt id %d", p->ids[i]);
            }
        }
    } else {
        check_msgs(r->msgs, r->n_msgs, true);
    }
    /* The prompt text as if it were the output: sanitized into JSON. */
    srv_resp_meta m = {"cmpl-fuzz", 1700000000, r->model ? r->model : "m"};
    const srv_prompt *p0 = r->n_prompts ? &r->prompts[0] : NULL;
    srv_usage u = {p0 ? p0->n_ids : 0, 3, 1};
    srv_timings t = {1, 2, 3, 4, 10};
    const char *text = p0 && p0->text ? p0->text : (r->n_msgs ? r->msgs[0].content : "");
    size_t len = p0 && p0->text ? p0->len : strlen(text);
    srv_choice_body b = {text, len, "stop", NULL};
    check_json(srv_resp_full(r->api, &m, &b, 1, &u, &t), "srv_resp_full");
    check_json(srv_chunk_delta(r->api, &m, 0, "assistant", text, len, NULL, NULL, r->include_usage, &t),
               "srv_chunk_delta");
}

/* An accepted /v1/responses request: its messages, and the Response
 * object and stream events built from it are valid JSON. */
static void check_responses(const srv_request *r)
{
    check_msgs(r->msgs, r->n_msgs, true);
    FUZZ_ASSERT(r->max_tokens >= 0, "max_tokens %lld", (long long)r->max_tokens);
    srv_responses_meta m = {"resp_fuzz", "msg_fuzz", 1700000000, r->model ? r->model : "m", r};
    srv_usage u = {5, 3, 1};
    const char *text = r->msgs[r->n_msgs - 1].content;
    srv_responses_state st = {text, strlen(text), FINISH_LENGTH, &u, NULL, NULL};
    check_json(srv_responses_body(&m, &st), "srv_responses_body");
    inferd_buf sse = {0};
    int seq = 0;
    srv_responses_stream_begin(&sse, &m, &seq);
    srv_responses_stream_delta(&sse, &m, &seq, text, strlen(text));
    srv_responses_stream_end(&sse, &m, &seq, &st);
    FUZZ_ASSERT(seq == 9 && sse.len > 0, "responses stream: %d events", seq);
    inferd_buf_free(&sse);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *body = (const char *)data;
    for (int api = SRV_API_COMPLETIONS; api <= SRV_API_RESPONSES; api++) {
        srv_request r;
        srv_error e;
        memset(&e, 0, sizeof e);
        bool ok = api == SRV_API_RESPONSES ? srv_responses_parse(body, size, &k_lim, &r, &e)
                                           : srv_request_parse((srv_api)api, body, size, &k_lim, &r, &e);
        if (ok) {
            if (api == SRV_API_RESPONSES)
                check_responses(&r);
            else
                check_request(&r);
            srv_request_free(&r);
        } else {
            check_error(&e, api == SRV_API_CHAT        ? "chat"
                            : api == SRV_API_RESPONSES ? "responses"
                                                       : "completions");
        }
    }

    srv_tokenize_req tr;
    srv_error e;
    memset(&e, 0, sizeof e);
    if (srv_tokenize_parse(body, size, &k_lim, &tr, &e)) {
        FUZZ_ASSERT(!(tr.prompt && tr.msgs), "tokenize: prompt and messages");
        if (tr.prompt)
            FUZZ_ASSERT(fuzz_utf8_valid(tr.prompt, tr.prompt_len), "tokenize: prompt");
        else
            check_msgs(tr.msgs, tr.n_msgs, false);
        srv_tokenize_free(&tr);
    } else {
        check_error(&e, "tokenize");
    }

    srv_detokenize_req dr;
    memset(&e, 0, sizeof e);
    if (srv_detokenize_parse(body, size, &k_lim, &dr, &e)) {
        FUZZ_ASSERT(dr.n_ids >= 0 && (dr.n_ids == 0 || dr.ids), "detokenize: n_ids %d", dr.n_ids);
        for (int i = 0; i < dr.n_ids; i++)
            FUZZ_ASSERT(dr.ids[i] >= 0 && dr.ids[i] < k_lim.vocab_size, "detokenize: id %d", dr.ids[i]);
        check_json(srv_resp_tokenize(dr.ids, dr.n_ids, 4096), "srv_resp_tokenize");
        srv_detokenize_free(&dr);
    } else {
        check_error(&e, "detokenize");
    }
    return 0;
}
