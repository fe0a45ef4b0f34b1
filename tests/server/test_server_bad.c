/* tests/server/test_server_bad.c: the bad-input table, black-box.
 *
 * Every row is one HTTP request that must be refused with its documented
 * status and an OpenAI error body {"error": {"message", "type", "param",
 * "code"}} whose type/code (and param, when the row names one) match. The
 * server runs with an API key, a 64 KiB body limit and the Llama-2 chat
 * template (the no-template 400 is checked in test_server.c). Rows cover
 * completions (batched prompts: a bad element, 129 and 10000 prompts, one
 * prompt too long; echo; suffix; n and best_of: range, type, best_of < n,
 * streamed best_of > n, prompts x n above 128), chat and /v1/responses (every refused
 * feature, wrong types, ranges, deep nesting). After the table it
 * must still produce the reference greedy text and answer /v1/responses, its /metrics must count the
 * refusals, and it must exit 0 on SIGTERM (under ASan this includes the
 * leak check of everything the table made it allocate).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "common/util.h"
#include "prom_check.h"
#include "test_util.h"
#include "ts_client.h"

#define KEY "sk-test-0123456789"
#define BODY_LIMIT 65536

/* B_MANY_PROMPTS: SRV_MAX_PROMPTS + 1 (129) prompts; B_HUGE_PROMPTS: 10000;
 * B_MANY_BIAS: 301 logit_bias entries (one more than OpenAI's limit). */
typedef enum {
    B_TEXT = 0,
    B_DEEP_ARRAY,
    B_DEEP_OBJECT,
    B_OVERSIZE,
    B_BAD_UTF8,
    B_NUL,
    B_MANY_PROMPTS,
    B_HUGE_PROMPTS,
    B_MANY_BIAS
} body_kind;

typedef struct {
    const char *what;
    const char *method, *path;
    body_kind kind;
    const char *body;
    const char *auth; /* NULL = correct key, "" = none */
    int status;
    const char *type, *code;
    const char *param;  /* NULL = not checked */
    const char *needle; /* substring of message, or NULL */
} row;

#define CMP "/v1/completions"
#define CHAT "/v1/chat/completions"
#define RESP "/v1/responses"
#define RMSG "\"input\":[{\"role\":\"user\",\"content\":\"hi\"}]"
#define BAD "invalid_request_error", "invalid_request"

static const row k_rows[] = {
    {"malformed JSON", "POST", CMP, B_TEXT, "{\"prompt\": \"hi\"", NULL, 400, BAD, NULL, "malformed JSON"},
    {"empty body", "POST", CMP, B_TEXT, "", NULL, 400, BAD, NULL, "empty"},
    {"JSON array body", "POST", CMP, B_TEXT, "[1,2,3]", NULL, 400, BAD, NULL, "JSON object"},
    {"trailing garbage", "POST", CMP, B_TEXT, "{\"prompt\":\"hi\"} x", NULL, 400, BAD, NULL, "trailing"},
    {"NaN literal", "POST", CMP, B_TEXT, "{\"prompt\":\"hi\",\"temperature\":NaN}", NULL, 400, BAD, NULL,
     NULL},
    {"deeply nested arrays", "POST", CMP, B_DEEP_ARRAY, NULL, NULL, 400, BAD, NULL, "nesting"},
    {"deeply nested objects", "POST", CMP, B_DEEP_OBJECT, NULL, NULL, 400, BAD, NULL, "nesting"},
    {"missing prompt", "POST", CMP, B_TEXT, "{\"max_tokens\":5}", NULL, 400, BAD, "prompt", "required"},
    {"prompt wrong type", "POST", CMP, B_TEXT, "{\"prompt\":5}", NULL, 400, BAD, "prompt", NULL},
    {"empty prompt", "POST", CMP, B_TEXT, "{\"prompt\":\"\"}", NULL, 400, BAD, "prompt", "empty"},
    {"whitespace prompt", "POST", CMP, B_TEXT, "{\"prompt\":\" \\n\\t  \"}", NULL, 400, BAD, "prompt",
     "whitespace"},
    {"empty id prompt", "POST", CMP, B_TEXT, "{\"prompt\":[]}", NULL, 400, BAD, "prompt", "empty"},
    {"token id beyond vocab", "POST", CMP, B_TEXT, "{\"prompt\":[1,403,99999]}", NULL, 400, BAD, "prompt",
     "99999"},
    {"negative token id", "POST", CMP, B_TEXT, "{\"prompt\":[1,-3]}", NULL, 400, BAD, "prompt", "vocabulary"},
    {"fractional token id", "POST", CMP, B_TEXT, "{\"prompt\":[1,2.5]}", NULL, 400, BAD, "prompt", "integer"},
    {"batched prompts, one empty", "POST", CMP, B_TEXT, "{\"prompt\":[\"a\",\"\"]}", NULL, 400, BAD, "prompt",
     "'prompt'[1] must not be empty"},
    {"batched prompts, one not a prompt", "POST", CMP, B_TEXT, "{\"prompt\":[\"a\",5]}", NULL, 400, BAD,
     "prompt", "'prompt'[1] must be a string or an array of token ids"},
    {"batched ids, one beyond vocab", "POST", CMP, B_TEXT, "{\"prompt\":[[1,2],[1,600]]}", NULL, 400, BAD,
     "prompt", "'prompt'[1][1]: token id 600"},
    {"batched ids nested too deep", "POST", CMP, B_TEXT, "{\"prompt\":[[[1]]]}", NULL, 400, BAD, "prompt",
     "'prompt'[0]"},
    {"129 prompts", "POST", CMP, B_MANY_PROMPTS, NULL, NULL, 400, BAD, "prompt", "at most 128"},
    {"10000 prompts", "POST", CMP, B_HUGE_PROMPTS, NULL, NULL, 400, BAD, "prompt", "at most 128"},
    {"batched prompt too long for max_tokens", "POST", CMP, B_TEXT,
     "{\"prompt\":[\"a\",\"b c d e f\"],\"max_tokens\":509}", NULL, 400, "invalid_request_error",
     "context_length_exceeded", "max_tokens", "'prompt'[1]: This model's maximum context length is 512"},
    {"invalid UTF-8 prompt", "POST", CMP, B_BAD_UTF8, NULL, NULL, 400, BAD, "prompt", "UTF-8"},
    {"NUL-only prompt", "POST", CMP, B_NUL, NULL, NULL, 400, BAD, NULL, "U+0000"},
    {"NUL inside a prompt (truncated it)", "POST", CMP, B_TEXT, "{\"prompt\":\"hi\\u0000there\"}", NULL, 400,
     BAD, NULL, "U+0000"},
    {"NUL inside chat content", "POST", CHAT, B_TEXT,
     "{\"messages\":[{\"role\":\"user\",\"content\":\"a\\u0000b\"}]}", NULL, 400, BAD, NULL, "U+0000"},
    {"max_tokens string", "POST", CMP, B_TEXT, "{\"prompt\":\"hi\",\"max_tokens\":\"10\"}", NULL, 400, BAD,
     "max_tokens", "integer"},
    {"max_tokens zero", "POST", CMP, B_TEXT, "{\"prompt\":\"hi\",\"max_tokens\":0}", NULL, 400, BAD,
     "max_tokens", NULL},
    {"max_tokens negative", "POST", CMP, B_TEXT, "{\"prompt\":\"hi\",\"max_tokens\":-5}", NULL, 400, BAD,
     "max_tokens", NULL},
    {"max_tokens fractional", "POST", CMP, B_TEXT, "{\"prompt\":\"hi\",\"max_tokens\":3.5}", NULL, 400, BAD,
     "max_tokens", NULL},
    {"max_tokens 1e300", "POST", CMP, B_TEXT, "{\"prompt\":\"hi\",\"max_tokens\":1e300}", NULL, 400, BAD,
     "max_tokens", NULL},
    {"huge max_tokens", "POST", CMP, B_TEXT, "{\"prompt\":\"hi\",\"max_tokens\":1000000}", NULL, 400,
     "invalid_request_error", "context_length_exceeded", "max_tokens",
     "512 tokens. However, you requested 1000003"},
    {"chat huge max_completion_tokens", "POST", CHAT, B_TEXT,
     "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_completion_tokens\":4096}", NULL, 400,
     "invalid_request_error", "context_length_exceeded", "max_completion_tokens", "4096 in the completion"},
    {"temperature negative", "POST", CMP, B_TEXT, "{\"prompt\":\"hi\",\"temperature\":-0.5}", NULL, 400, BAD,
     "temperature", NULL},
    {"temperature too high", "POST", CMP, B_TEXT, "{\"prompt\":\"hi\",\"temperature\":5}", NULL, 400, BAD,
     "temperature", NULL},
    {"temperature string", "POST", CMP, B_TEXT, "{\"prompt\":\"hi\",\"temperature\":\"hot\"}", NULL, 400, BAD,
     "temperature", "number"},
    {"top_p zero", "POST", CMP, B_TEXT, "{\"prompt\":\"hi\",\"top_p\":0}", NULL, 400, BAD, "top_p", NULL},
    {"top_p above 1", "POST", CMP, B_TEXT, "{\"prompt\":\"hi\",\"top_p\":1.5}", NULL, 400, BAD, "top_p",
     NULL},
    {"top_k below -1", "POST", CMP, B_TEXT, "{\"prompt\":\"hi\",\"top_k\":-2}", NULL, 400, BAD, "top_k",
     NULL},
    {"min_p above 1", "POST", CMP, B_TEXT, "{\"prompt\":\"hi\",\"min_p\":2}", NULL, 400, BAD, "min_p", NULL},
    {"seed fractional", "POST", CMP, B_TEXT, "{\"prompt\":\"hi\",\"seed\":1.5}", NULL, 400, BAD, "seed",
     NULL},
    {"n = 0", "POST", CMP, B_TEXT, "{\"prompt\":\"hi\",\"n\":0}", NULL, 400, BAD, "n", "[1, 16]"},
    {"n = 17", "POST", CMP, B_TEXT, "{\"prompt\":\"hi\",\"n\":17}", NULL, 400, BAD, "n", "[1, 16]"},
    {"n string", "POST", CMP, B_TEXT, "{\"prompt\":\"hi\",\"n\":\"2\"}", NULL, 400, BAD, "n", "integer"},
    {"n huge", "POST", CMP, B_TEXT, "{\"prompt\":\"hi\",\"n\":1e300}", NULL, 400, BAD, "n", NULL},
    {"n fractional", "POST", CMP, B_TEXT, "{\"prompt\":\"hi\",\"n\":1.5}", NULL, 400, BAD, "n", NULL},
    {"chat n = 17", "POST", CHAT, B_TEXT, "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"n\":17}",
     NULL, 400, BAD, "n", NULL},
    {"best_of < n", "POST", CMP, B_TEXT, "{\"prompt\":\"hi\",\"n\":3,\"best_of\":2}", NULL, 400, BAD,
     "best_of", "greater than or equal"},
    {"best_of 17", "POST", CMP, B_TEXT, "{\"prompt\":\"hi\",\"best_of\":17}", NULL, 400, BAD, "best_of",
     NULL},
    {"best_of streamed", "POST", CMP, B_TEXT, "{\"prompt\":\"hi\",\"best_of\":3,\"stream\":true}", NULL, 400,
     BAD, "best_of", "streamed"},
    {"chat best_of", "POST", CHAT, B_TEXT,
     "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"best_of\":2}", NULL, 400, BAD, "best_of",
     NULL},
    {"prompts x n above 128", "POST", CMP, B_TEXT,
     "{\"prompt\":[\"a\",\"b\",\"c\",\"d\",\"e\",\"f\",\"g\",\"h\",\"i\"],\"n\":16}", NULL, 400, BAD,
     "prompt", "at most 128"},
    {"echo not bool", "POST", CMP, B_TEXT, "{\"prompt\":\"hi\",\"echo\":\"yes\"}", NULL, 400, BAD, "echo",
     "boolean"},
    {"echo with logprobs 21", "POST", CMP, B_TEXT, "{\"prompt\":\"hi\",\"echo\":true,\"logprobs\":21}", NULL,
     400, BAD, "logprobs", NULL},
    {"suffix", "POST", CMP, B_TEXT, "{\"prompt\":\"hi\",\"suffix\":\"end\"}", NULL, 400, BAD, "suffix",
     "fill-in-the-middle"},
    {"suffix wrong type", "POST", CMP, B_TEXT, "{\"prompt\":\"hi\",\"suffix\":5}", NULL, 400, BAD, "suffix",
     "string"},
    {"logprobs 21", "POST", CMP, B_TEXT, "{\"prompt\":\"hi\",\"logprobs\":21}", NULL, 400, BAD, "logprobs",
     NULL},
    {"logprobs negative", "POST", CMP, B_TEXT, "{\"prompt\":\"hi\",\"logprobs\":-1}", NULL, 400, BAD,
     "logprobs", NULL},
    {"logprobs bool (completions)", "POST", CMP, B_TEXT, "{\"prompt\":\"hi\",\"logprobs\":true}", NULL, 400,
     BAD, "logprobs", NULL},
    {"stream not bool", "POST", CMP, B_TEXT, "{\"prompt\":\"hi\",\"stream\":\"yes\"}", NULL, 400, BAD,
     "stream", NULL},
    {"stream_options without stream", "POST", CMP, B_TEXT,
     "{\"prompt\":\"hi\",\"stream_options\":{\"include_usage\":true}}", NULL, 400, BAD, "stream_options",
     NULL},
    {"stop wrong type", "POST", CMP, B_TEXT, "{\"prompt\":\"hi\",\"stop\":7}", NULL, 400, BAD, "stop", NULL},
    {"too many stops", "POST", CMP, B_TEXT,
     "{\"prompt\":\"hi\",\"stop\":[\"a\",\"b\",\"c\",\"d\",\"e\",\"f\",\"g\",\"h\",\"i\",\"j\",\"k\",\"l\","
     "\"m\",\"n\",\"o\",\"p\",\"q\"]}",
     NULL, 400, BAD, "stop", "at most 16"},
    {"empty stop string", "POST", CMP, B_TEXT, "{\"prompt\":\"hi\",\"stop\":[\"\"]}", NULL, 400, BAD, "stop",
     NULL},
    {"stop_token_ids beyond vocab", "POST", CMP, B_TEXT, "{\"prompt\":\"hi\",\"stop_token_ids\":[600]}", NULL,
     400, BAD, "stop_token_ids", NULL},
    {"min_tokens above max_tokens", "POST", CMP, B_TEXT,
     "{\"prompt\":\"hi\",\"min_tokens\":10,\"max_tokens\":5}", NULL, 400, BAD, "min_tokens", NULL},
    {"presence_penalty above 2", "POST", CMP, B_TEXT, "{\"prompt\":\"hi\",\"presence_penalty\":2.5}", NULL,
     400, BAD, "presence_penalty", NULL},
    {"frequency_penalty below -2", "POST", CMP, B_TEXT, "{\"prompt\":\"hi\",\"frequency_penalty\":-2.01}",
     NULL, 400, BAD, "frequency_penalty", NULL},
    {"frequency_penalty string", "POST", CMP, B_TEXT, "{\"prompt\":\"hi\",\"frequency_penalty\":\"1\"}", NULL,
     400, BAD, "frequency_penalty", "number"},
    {"repetition_penalty zero", "POST", CMP, B_TEXT, "{\"prompt\":\"hi\",\"repetition_penalty\":0}", NULL,
     400, BAD, "repetition_penalty", NULL},
    {"chat presence_penalty above 2", "POST", CHAT, B_TEXT,
     "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"presence_penalty\":3}", NULL, 400, BAD,
     "presence_penalty", NULL},
    {"logit_bias id beyond vocab", "POST", CMP, B_TEXT, "{\"prompt\":\"hi\",\"logit_bias\":{\"600\":10}}",
     NULL, 400, BAD, "logit_bias", "600"},
    {"logit_bias bias above 100", "POST", CMP, B_TEXT, "{\"prompt\":\"hi\",\"logit_bias\":{\"5\":101}}", NULL,
     400, BAD, "logit_bias", NULL},
    {"logit_bias key not an id", "POST", CMP, B_TEXT, "{\"prompt\":\"hi\",\"logit_bias\":{\"abc\":1}}", NULL,
     400, BAD, "logit_bias", NULL},
    {"logit_bias not an object", "POST", CMP, B_TEXT, "{\"prompt\":\"hi\",\"logit_bias\":[5]}", NULL, 400,
     BAD, "logit_bias", NULL},
    {"logit_bias 301 entries", "POST", CMP, B_MANY_BIAS, NULL, NULL, 400, BAD, "logit_bias", "300"},
    {"unknown model", "POST", CMP, B_TEXT, "{\"prompt\":\"hi\",\"model\":\"gpt-4\"}", NULL, 404,
     "not_found_error", "model_not_found", "model", "gpt-4"},
    {"model wrong type", "POST", CMP, B_TEXT, "{\"prompt\":\"hi\",\"model\":[1]}", NULL, 400, BAD, "model",
     NULL},
    {"chat roles out of order", "POST", CHAT, B_TEXT,
     "{\"messages\":[{\"role\":\"assistant\",\"content\":\"a\"},{\"role\":\"assistant\",\"content\":\"b\"}]}",
     NULL, 400, BAD, "messages", "user"},
    {"chat messages not array", "POST", CHAT, B_TEXT, "{\"messages\":\"hi\"}", NULL, 400, BAD, "messages",
     NULL},
    {"chat empty messages", "POST", CHAT, B_TEXT, "{\"messages\":[]}", NULL, 400, BAD, "messages", "empty"},
    {"chat unknown role", "POST", CHAT, B_TEXT, "{\"messages\":[{\"role\":\"wizard\",\"content\":\"x\"}]}",
     NULL, 400, BAD, "messages", "role"},
    {"chat image part", "POST", CHAT, B_TEXT,
     "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\",\"image_url\":{\"url\":\"x\"}}]}"
     "]}",
     NULL, 400, BAD, "messages", "text"},
    {"chat missing content", "POST", CHAT, B_TEXT, "{\"messages\":[{\"role\":\"user\"}]}", NULL, 400, BAD,
     "messages", NULL},
    {"chat top_logprobs without logprobs", "POST", CHAT, B_TEXT,
     "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"top_logprobs\":3}", NULL, 400, BAD,
     "top_logprobs", NULL},
    {"chat tools", "POST", CHAT, B_TEXT,
     "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"tools\":[{\"type\":\"function\"}]}", NULL, 400,
     BAD, "tools", NULL},
    {"responses malformed JSON", "POST", RESP, B_TEXT, "{\"input\":", NULL, 400, BAD, NULL, "malformed"},
    {"responses deeply nested input", "POST", RESP, B_DEEP_ARRAY, NULL, NULL, 400, BAD, NULL, "nesting"},
    {"responses NUL in input", "POST", RESP, B_TEXT, "{\"input\":\"a\\u0000b\"}", NULL, 400, BAD, NULL,
     "U+0000"},
    {"responses missing input", "POST", RESP, B_TEXT, "{\"max_output_tokens\":5}", NULL, 400, BAD, "input",
     "required"},
    {"responses input wrong type", "POST", RESP, B_TEXT, "{\"input\":5}", NULL, 400, BAD, "input", NULL},
    {"responses empty input", "POST", RESP, B_TEXT, "{\"input\":[]}", NULL, 400, BAD, "input", "empty"},
    {"responses input item not an object", "POST", RESP, B_TEXT, "{\"input\":[\"hi\"]}", NULL, 400, BAD,
     "input", "'input'[0]"},
    {"responses function_call_output item", "POST", RESP, B_TEXT,
     "{\"input\":[{\"type\":\"function_call_output\",\"call_id\":\"c\",\"output\":\"o\"}]}", NULL, 400, BAD,
     "input", "function_call_output"},
    {"responses image part", "POST", RESP, B_TEXT,
     "{\"input\":[{\"role\":\"user\",\"content\":[{\"type\":\"input_image\",\"image_url\":\"x\"}]}]}", NULL,
     400, BAD, "input", "'input'[0].content[0]"},
    {"responses tool role", "POST", RESP, B_TEXT, "{\"input\":[{\"role\":\"tool\",\"content\":\"x\"}]}", NULL,
     400, BAD, "input", "role"},
    {"responses instructions wrong type", "POST", RESP, B_TEXT, "{" RMSG ",\"instructions\":[1]}", NULL, 400,
     BAD, "instructions", NULL},
    {"responses tools", "POST", RESP, B_TEXT, "{" RMSG ",\"tools\":[{\"type\":\"function\",\"name\":\"f\"}]}",
     NULL, 400, BAD, "tools", "not supported"},
    {"responses tool_choice required", "POST", RESP, B_TEXT, "{" RMSG ",\"tool_choice\":\"required\"}", NULL,
     400, BAD, "tool_choice", NULL},
    {"responses reasoning", "POST", RESP, B_TEXT, "{" RMSG ",\"reasoning\":{\"effort\":\"high\"}}", NULL, 400,
     BAD, "reasoning", "not supported"},
    {"responses previous_response_id", "POST", RESP, B_TEXT,
     "{" RMSG ",\"store\":true,\"previous_response_id\":\"resp_1\"}", NULL, 400, BAD, "previous_response_id",
     "does not store"},
    {"responses conversation", "POST", RESP, B_TEXT, "{" RMSG ",\"conversation\":\"conv_1\"}", NULL, 400, BAD,
     "conversation", NULL},
    {"responses background", "POST", RESP, B_TEXT, "{" RMSG ",\"background\":true}", NULL, 400, BAD,
     "background", NULL},
    {"responses include", "POST", RESP, B_TEXT, "{" RMSG ",\"include\":[\"message.output_text.logprobs\"]}",
     NULL, 400, BAD, "include", NULL},
    {"responses json format", "POST", RESP, B_TEXT,
     "{" RMSG ",\"text\":{\"format\":{\"type\":\"json_schema\",\"name\":\"x\",\"schema\":{}}}}", NULL, 400,
     BAD, "text", NULL},
    {"responses truncation auto", "POST", RESP, B_TEXT, "{" RMSG ",\"truncation\":\"auto\"}", NULL, 400, BAD,
     "truncation", NULL},
    {"responses top_logprobs", "POST", RESP, B_TEXT, "{" RMSG ",\"top_logprobs\":3}", NULL, 400, BAD,
     "top_logprobs", NULL},
    {"responses max_output_tokens zero", "POST", RESP, B_TEXT, "{" RMSG ",\"max_output_tokens\":0}", NULL,
     400, BAD, "max_output_tokens", NULL},
    {"responses max_output_tokens string", "POST", RESP, B_TEXT, "{" RMSG ",\"max_output_tokens\":\"9\"}",
     NULL, 400, BAD, "max_output_tokens", "integer"},
    {"responses huge max_output_tokens", "POST", RESP, B_TEXT, "{" RMSG ",\"max_output_tokens\":4096}", NULL,
     400, "invalid_request_error", "context_length_exceeded", "max_output_tokens", "4096 in the completion"},
    {"responses temperature too high", "POST", RESP, B_TEXT, "{" RMSG ",\"temperature\":3}", NULL, 400, BAD,
     "temperature", NULL},
    {"responses stream not bool", "POST", RESP, B_TEXT, "{" RMSG ",\"stream\":1}", NULL, 400, BAD, "stream",
     NULL},
    {"responses unknown model", "POST", RESP, B_TEXT, "{" RMSG ",\"model\":\"gpt-4o\"}", NULL, 404,
     "not_found_error", "model_not_found", "model", "gpt-4o"},
    {"GET on responses", "GET", RESP, B_TEXT, NULL, NULL, 405, "invalid_request_error", "method_not_allowed",
     NULL, NULL},
    {"responses without key", "POST", RESP, B_TEXT, "{" RMSG "}", "", 401, "authentication_error",
     "invalid_api_key", NULL, NULL},
    {"tokenize prompt wrong type", "POST", "/tokenize", B_TEXT, "{\"prompt\":3}", NULL, 400, BAD, "prompt",
     NULL},
    {"detokenize id beyond vocab", "POST", "/detokenize", B_TEXT, "{\"tokens\":[1,100000]}", NULL, 400, BAD,
     "tokens", NULL},
    {"detokenize missing tokens", "POST", "/detokenize", B_TEXT, "{}", NULL, 400, BAD, "tokens", NULL},
    {"oversized body", "POST", CMP, B_OVERSIZE, NULL, NULL, 413, "invalid_request_error", "request_too_large",
     NULL, "limit"},
    {"GET on a POST route", "GET", CMP, B_TEXT, NULL, NULL, 405, "invalid_request_error",
     "method_not_allowed", NULL, NULL},
    {"DELETE on a GET route", "DELETE", "/v1/models", B_TEXT, NULL, NULL, 405, "invalid_request_error",
     "method_not_allowed", NULL, NULL},
    {"PUT on chat", "PUT", CHAT, B_TEXT, "{}", NULL, 405, "invalid_request_error", "method_not_allowed", NULL,
     NULL},
    {"unknown route", "GET", "/v1/engines", B_TEXT, NULL, NULL, 404, "not_found_error", "not_found", NULL,
     "no route"},
    {"unknown route POST", "POST", "/v2/completions", B_TEXT, "{}", NULL, 404, "not_found_error", "not_found",
     NULL, NULL},
    {"unknown model path", "GET", "/v1/models/other", B_TEXT, NULL, NULL, 404, "not_found_error",
     "model_not_found", NULL, NULL},
    {"missing API key", "POST", CMP, B_TEXT, "{\"prompt\":\"hi\"}", "", 401, "authentication_error",
     "invalid_api_key", NULL, "missing"},
    {"wrong API key", "POST", CMP, B_TEXT, "{\"prompt\":\"hi\"}", "Bearer sk-wrong", 401,
     "authentication_error", "invalid_api_key", NULL, "invalid API key"},
    {"API key prefix", "POST", CMP, B_TEXT, "{\"prompt\":\"hi\"}", "Bearer sk-test-012345678", 401,
     "authentication_error", "invalid_api_key", NULL, NULL},
    {"API key too long", "POST", CMP, B_TEXT, "{\"prompt\":\"hi\"}", "Bearer " KEY "9", 401,
     "authentication_error", "invalid_api_key", NULL, NULL},
    {"Basic auth scheme", "POST", CMP, B_TEXT, "{\"prompt\":\"hi\"}", "Basic c2stdGVzdA==", 401,
     "authentication_error", "invalid_api_key", NULL, "Bearer"},
    {"models without key", "GET", "/v1/models", B_TEXT, NULL, "", 401, "authentication_error",
     "invalid_api_key", NULL, NULL},
};

static char *make_body(const row *r, long *len)
{
    if (r->kind == B_TEXT) {
        *len = r->body ? (long)strlen(r->body) : 0;
        return r->body ? strdup(r->body) : NULL;
    }
    size_t n = 0;
    char *b = NULL;
    if (r->kind == B_DEEP_ARRAY || r->kind == B_DEEP_OBJECT) {
        int depth = 3000;
        const char *open = r->kind == B_DEEP_ARRAY ? "[" : "{\"a\":";
        const char *close_ = r->kind == B_DEEP_ARRAY ? "]" : "}";
        size_t ol = strlen(open);
        b = malloc(20 + (size_t)depth * (ol + 1));
        n = (size_t)sprintf(b, "{\"%s\":", strcmp(r->path, RESP) == 0 ? "input" : "prompt");
        for (int i = 0; i < depth; i++, n += ol)
            memcpy(b + n, open, ol);
        memcpy(b + n, "1", 1);
        n++;
        for (int i = 0; i < depth; i++)
            b[n++] = close_[0];
        b[n++] = '}';
    } else if (r->kind == B_MANY_PROMPTS || r->kind == B_HUGE_PROMPTS) {
        int cnt = r->kind == B_MANY_PROMPTS ? 129 : 10000;
        b = malloc(32 + (size_t)cnt * 4);
        n = (size_t)sprintf(b, "{\"prompt\":[");
        for (int i = 0; i < cnt; i++)
            n += (size_t)sprintf(b + n, "%s\"a\"", i ? "," : "");
        n += (size_t)sprintf(b + n, "]}");
    } else if (r->kind == B_MANY_BIAS) {
        b = malloc(64 + 301 * 12);
        n = (size_t)sprintf(b, "{\"prompt\":\"hi\",\"logit_bias\":{");
        for (int i = 0; i < 301; i++)
            n += (size_t)sprintf(b + n, "%s\"%d\":1", i ? "," : "", i);
        n += (size_t)sprintf(b + n, "}}");
    } else if (r->kind == B_OVERSIZE) {
        n = BODY_LIMIT + 4096;
        b = malloc(n);
        memset(b, 'a', n);
        memcpy(b, "{\"prompt\":\"", 11);
        memcpy(b + n - 2, "\"}", 2);
    } else if (r->kind == B_BAD_UTF8) {
        static const char k[] = "{\"prompt\":\"caf\xc3 \xff\xfe end\"}";
        n = sizeof k - 1;
        b = malloc(n);
        memcpy(b, k, n);
    } else {
        static const char k[] = "{\"prompt\":\"\\u0000\"}";
        n = sizeof k - 1;
        b = malloc(n);
        memcpy(b, k, n);
    }
    *len = (long)n;
    return b;
}

static void check_row(const ts_server *s, size_t i)
{
    const row *r = &k_rows[i];
    long len;
    char *body = make_body(r, &len);
    ts_resp resp = ts_request(s, r->method, r->path, body, len, r->auth);
    free(body);
    ck_assert_msg(resp.status == r->status, "row %zu (%s): HTTP %ld, want %d: %s", i, r->what, resp.status,
                  r->status, resp.body);
    ck_assert_msg(strncmp(resp.ctype, "application/json", 16) == 0, "row %zu (%s): content-type %s", i,
                  r->what, resp.ctype);
    cJSON *j = cJSON_Parse(resp.body);
    const cJSON *e = cJSON_GetObjectItem(j, "error");
    ck_assert_msg(cJSON_IsObject(e) && cJSON_GetArraySize(j) == 1, "row %zu (%s): no error object: %s", i,
                  r->what, resp.body);
    const cJSON *msg = cJSON_GetObjectItem(e, "message"), *type = cJSON_GetObjectItem(e, "type");
    const cJSON *param = cJSON_GetObjectItem(e, "param"), *code = cJSON_GetObjectItem(e, "code");
    ck_assert_msg(cJSON_IsString(msg) && strlen(msg->valuestring) > 0, "row %zu: empty message", i);
    ck_assert_msg(param && (cJSON_IsString(param) || cJSON_IsNull(param)), "row %zu: no param key", i);
    ck_assert_msg(cJSON_IsString(type) && !strcmp(type->valuestring, r->type), "row %zu (%s): type %s: %s", i,
                  r->what, cJSON_IsString(type) ? type->valuestring : "?", resp.body);
    ck_assert_msg(cJSON_IsString(code) && !strcmp(code->valuestring, r->code), "row %zu (%s): code %s: %s", i,
                  r->what, cJSON_IsString(code) ? code->valuestring : "?", resp.body);
    if (r->param)
        ck_assert_msg(cJSON_IsString(param) && !strcmp(param->valuestring, r->param),
                      "row %zu (%s): param: %s", i, r->what, resp.body);
    if (r->needle)
        ck_assert_msg(strstr(msg->valuestring, r->needle) != NULL, "row %zu (%s): message lacks '%s': %s", i,
                      r->what, r->needle, msg->valuestring);
    if (r->status == 405)
        ck_assert_msg(resp.allow[0] != '\0', "row %zu: 405 without Allow", i);
    cJSON_Delete(j);
    ts_resp_free(&resp);
}

START_TEST(test_bad_input_table)
{
    ck_assert_int_ge((int)INFERD_ARRAY_LEN(k_rows), 30);
    ts_server s;
    const char *args[] = {"--api-key", KEY, "--max-body-bytes", "65536", "--chat-template", "llama-2", NULL};
    ck_assert(ts_start(&s, args));
    for (size_t i = 0; i < INFERD_ARRAY_LEN(k_rows); i++)
        check_row(&s, i);
    printf("bad-input table: %zu rows passed\n", INFERD_ARRAY_LEN(k_rows));
    /* the server still serves correctly */
    long st;
    cJSON *j = ts_post_json(&s, "/v1/completions",
                            "{\"prompt\":\"Once upon a time\",\"max_tokens\":60,\"temperature\":0}", &st);
    ck_assert_int_eq(st, 200);
    const cJSON *t = cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0), "text");
    char *golden = ts_golden_text();
    ck_assert(golden != NULL);
    ck_assert_str_eq(t->valuestring, golden);
    free(golden);
    cJSON_Delete(j);
    j = ts_post_json(&s, RESP, "{\"input\":\"Hi\",\"max_output_tokens\":4,\"temperature\":0}", &st);
    ck_assert_int_eq(st, 200);
    ck_assert_int_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "usage"), "output_tokens")->valueint, 4);
    cJSON_Delete(j);
    char *m = ts_metrics(&s);
    char err[512];
    ck_assert_msg(prom_validate(m, err, sizeof err), "%s", err);
    double v400 = 0;
    ck_assert(prom_value(m, "inferd:http_requests_total{code=\"400\"}", &v400));
    ck_assert_int_ge((int)v400, 40);
    free(m);
    ck_assert(ts_wait_engine(&s, 0, 0, true, 5.0));
    int rc = ts_stop(&s, 30.0);
    if (rc != 0)
        ts_dump_log(&s);
    ck_assert_msg(rc == 0, "server exit status %d", rc);
}
END_TEST

int main(void)
{
    ts_require_server();
    Suite *s = suite_create("server_bad_input");
    TCase *tc = tcase_create("table");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_bad_input_table);
    suite_add_tcase(s, tc);
    return test_run_suite(s);
}
