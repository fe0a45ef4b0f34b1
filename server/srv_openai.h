/* server/srv_openai.h: the OpenAI wire format: parsing and validating
 * request bodies (cJSON) into plain structs, and building response bodies
 * and stream chunks. Pure functions: no tokenizer, no engine, no I/O, so the
 * bad-input tables run as unit tests.
 */
#ifndef INFERD_SERVER_SRV_OPENAI_H
#define INFERD_SERVER_SRV_OPENAI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "common/usage.h"
#include "scheduler/engine.h"
#include "server/srv_chat.h"
#include "server/srv_errors.h"

/* The generation APIs. RESPONSES (/v1/responses, srv_responses.h) is
 * parsed by its own module into the same srv_request, with msgs rendered
 * through the chat template as CHAT's are. */
typedef enum { SRV_API_COMPLETIONS = 0, SRV_API_CHAT, SRV_API_RESPONSES } srv_api;

/* Most prompts in one /v1/completions request (a batched "prompt" array).
 * Each prompt becomes its own engine request, so the bound keeps one HTTP
 * request from filling the engine's queue; twice the default max-num-seqs
 * (64) lets a batch keep a default engine busy without flooding it. */
#define SRV_MAX_PROMPTS 128

typedef struct {
    const char *served_model_name; /* requests naming another model get 404 */
    int vocab_size;                /* token ids must be in [0, vocab_size) */
    const sampling_params *defaults; /* what omitted sampling fields get (generation_config.json); NULL: the table's */
} srv_parse_limits;

/* One completions prompt: text or token ids, exactly one of them set. */
typedef struct {
    char *text; /* text prompt (heap, valid UTF-8, not blank) or NULL */
    size_t len;
    int32_t *ids; /* token prompt [n_ids] (heap, ids in the vocabulary) or NULL */
    int n_ids;
} srv_prompt;

/* What a chat completions or /tokenize request hands the chat template
 * (vLLM's fields), validated and bounded (the SRV_CHAT_MAX_* of
 * srv_chat.h). messages are in the shape srv_chat_encode_json takes:
 * role (system, developer, user, assistant, tool) and content (a string,
 * text parts, or null for an assistant), name, an assistant's tool_calls
 * with function.arguments parsed from its JSON string, reasoning, a tool
 * message's tool_call_id. All trees owned. */
typedef struct {
    cJSON *messages;  /* array, NULL when the request has none (responses) */
    cJSON *tools;     /* /tokenize's "tools" (array) or NULL; chat completions refuse tools for now */
    cJSON *documents; /* "documents" (array of objects) or NULL */
    cJSON *kwargs;    /* "chat_template_kwargs" (object) or NULL */
    bool add_generation_prompt;  /* default true; false when continue_final_message */
    bool continue_final_message; /* default false */
    size_t text_bytes;           /* bytes of client text in all of the above (the prompt size bound) */
} srv_chat_req;

void srv_chat_req_free(srv_chat_req *c);
/* The srv_chat_inputs of c (borrowing its trees). */
void srv_chat_req_inputs(const srv_chat_req *c, srv_chat_inputs *in);

/* A validated /v1/completions, /v1/chat/completions or /v1/responses
 * request. */
typedef struct {
    srv_api api;
    char *model;         /* requested name (heap) or NULL */
    srv_prompt *prompts; /* completions: [n_prompts] in request order (heap), 1..SRV_MAX_PROMPTS */
    int n_prompts;
    srv_chat_msg *msgs; /* chat (flat view of chat.messages) / responses messages [n_msgs] (heap) */
    int n_msgs;
    srv_chat_req chat;  /* chat: the template inputs (responses: zero, msgs is the input) */
    sampling_params sp; /* sp.stop[i] points into stops[i]; sp.max_tokens set later */
    sampling_seqs seqs; /* completions / chat: n choices of best_of sequences per prompt (responses: zero = 1) */
    char *stops[SAMPLING_MAX_STOP];
    int64_t max_tokens;      /* requested (the max_tokens row's range), 0 when not given */
    bool add_special_tokens; /* completions text prompt: add BOS (default true) */
    bool echo;               /* completions: prepend each prompt's text to its choice */
    bool stream, include_usage;
    char *instructions; /* responses: the request's "instructions" (heap) or NULL, echoed back */
} srv_request;

/* Parse and validate a request body. The sampling fields are read through
 * the sampling table of scheduler/engine.h (sampling_row_set_number, then
 * sampling_params_validate), so their ranges are the engine's; only the
 * API's own shape rules (types, aliases, top_logprobs needing logprobs)
 * live here. On failure returns false with *err set (400, or 404 for an
 * unknown model; param names the field) and *r freed. */
bool srv_request_parse(srv_api api, const char *body, size_t len, const srv_parse_limits *lim, srv_request *r,
                       srv_error *err);
void srv_request_free(srv_request *r);

/* POST /tokenize: {"prompt": str} or {"messages": [...]} with the chat
 * template inputs of chat completions plus "tools" (vLLM's /tokenize),
 * optional "add_special_tokens" (default true for prompt, false for
 * messages). */
typedef struct {
    char *model;
    char *prompt;
    size_t prompt_len;
    srv_chat_msg *msgs; /* flat view of chat.messages */
    int n_msgs;
    srv_chat_req chat;
    bool add_special_tokens;
} srv_tokenize_req;

bool srv_tokenize_parse(const char *body, size_t len, const srv_parse_limits *lim, srv_tokenize_req *r,
                        srv_error *err);
void srv_tokenize_free(srv_tokenize_req *r);

/* POST /detokenize: {"tokens": [ids]}. */
typedef struct {
    char *model;
    int32_t *ids;
    int n_ids;
} srv_detokenize_req;

bool srv_detokenize_parse(const char *body, size_t len, const srv_parse_limits *lim, srv_detokenize_req *r,
                          srv_error *err);
void srv_detokenize_free(srv_detokenize_req *r);

/* ---- responses ----------------------------------------------------------- */

/* Token counts of a response (common/usage.h writes its JSON). */
typedef inferd_usage srv_usage;

/* Per-request timings in milliseconds (negative = not reached). */
typedef struct {
    double queue_ms, ttft_ms, prefill_ms, decode_ms, total_ms;
} srv_timings;

/* The identity every body of one request shares. */
typedef struct {
    const char *id;  /* "cmpl-..." / "chatcmpl-..." */
    int64_t created; /* unix seconds */
    const char *model;
} srv_resp_meta;

/* One choice of a full body. text may contain any bytes (sanitized to
 * UTF-8) and may be NULL (""); logprobs (taken, may be NULL = null) is a
 * srv_lp_* object. */
typedef struct {
    const char *text;
    size_t len;
    const char *finish;
    cJSON *logprobs;
} srv_choice_body;

/* Full non-streaming body of a completions or chat request: choices[i]
 * gets "index" i. Takes every choice's logprobs. Heap string. */
char *srv_resp_full(srv_api api, const srv_resp_meta *m, srv_choice_body *choices, int n, const srv_usage *u,
                    const srv_timings *t);

/* One SSE event payload (without "data: "): a text delta chunk of choice
 * `index`. For chat, role (may be NULL) goes into the delta; text may be
 * NULL (no content key). finish NULL = null. usage_null adds "usage": null
 * (include_usage streams). timings (may be NULL) is added at the top level.
 * Heap string. */
char *srv_chunk_delta(srv_api api, const srv_resp_meta *m, int index, const char *role, const char *text,
                      size_t len, const char *finish, cJSON *logprobs, bool usage_null, const srv_timings *t);

/* The final usage chunk of include_usage streams: empty choices + usage
 * (+ timings). Heap string. */
char *srv_chunk_usage(srv_api api, const srv_resp_meta *m, const srv_usage *u, const srv_timings *t);

/* GET /v1/models (one model) or /v1/models/{id} (single object). */
char *srv_resp_models(const char *name, int64_t created, int max_model_len, bool single);

/* /tokenize and /detokenize responses. */
char *srv_resp_tokenize(const int32_t *ids, int n, int max_model_len);
char *srv_resp_detokenize(const char *text, size_t len);

/* ---- logprobs -------------------------------------------------------------- */

/* Text of one token (heap, valid UTF-8). */
typedef char *(*srv_token_text_fn)(void *user, int32_t id);

/* New empty logprobs object: completions {"tokens":[], "token_logprobs":[],
 * "top_logprobs":[], "text_offset":[]}; chat {"content": []}. */
cJSON *srv_lp_new(srv_api api);
/* Append n sampled tokens with their top-N alternatives. *text_offset
 * (completions) advances by each token's text length. */
void srv_lp_append(srv_api api, cJSON *lp, const engine_logprob *lps, int n, srv_token_text_fn fn, void *user,
                   size_t *text_offset);
/* Completions echo with logprobs: the prompt's entries, first0 (the first
 * prompt token: null logprob and null top_logprobs, as OpenAI and vLLM
 * answer) then lps[0, n) (prompt tokens 1..n). Offsets start at 0 and are
 * clamped to echo_len, the echoed text's length (a token's rendered text,
 * "<s>" for one, need not be in the echo), so they stay monotone and the
 * generated tokens' offsets, from echo_len on, follow them. */
void srv_lp_append_prompt(cJSON *lp, int32_t first0, const engine_logprob *lps, int n, srv_token_text_fn fn,
                          void *user, size_t echo_len);

#endif
