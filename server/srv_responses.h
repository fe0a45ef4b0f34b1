/* server/srv_responses.h: the text subset of OpenAI's Responses API
 * (POST /v1/responses), the endpoint the Vercel AI SDK's default OpenAI
 * provider and LangChain's Responses mode call.
 *
 * A request is parsed into the same srv_request as chat completions
 * (api SRV_API_RESPONSES): "instructions" becomes a leading system message,
 * "input" (a string, or a list of text messages) the turns after it, and
 * srv_gen renders them through the model's chat template as it does for
 * chat. What is refused with a 400 naming the field: tools, reasoning,
 * stored state (previous_response_id, conversation, prompt templates,
 * background), non-text input parts, output formats other than text,
 * "include" entries and logprobs, truncation "auto".
 *
 * Output is the Response object; a stream is OpenAI's typed event sequence
 * ("event: <type>" + "data: {...}", a sequence_number on each, no [DONE]):
 * response.created, response.in_progress, response.output_item.added,
 * response.content_part.added, response.output_text.delta..., then
 * response.output_text.done, response.content_part.done,
 * response.output_item.done and response.completed (or response.incomplete
 * when max_output_tokens cut it), or response.failed on an error.
 * Pure functions (no engine, no I/O), so they run as unit tests.
 */
#ifndef INFERD_SERVER_SRV_RESPONSES_H
#define INFERD_SERVER_SRV_RESPONSES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/buf.h"
#include "server/srv_errors.h"
#include "server/srv_openai.h"

/* Parse and validate a /v1/responses body into *r (api RESPONSES, msgs
 * set, max_tokens from max_output_tokens). On failure returns false with
 * *err set (400, 404 for an unknown model; param names the field) and *r
 * freed. */
bool srv_responses_parse(const char *body, size_t len, const srv_parse_limits *lim, srv_request *r,
                         srv_error *err);

/* The identity of one response and the request fields it echoes back. */
typedef struct {
    const char *id;     /* "resp_..." */
    const char *msg_id; /* "msg_...": the one output message */
    int64_t created;    /* unix seconds */
    const char *model;
    const srv_request *req; /* instructions, max_output_tokens, temperature, top_p */
} srv_responses_meta;

/* Where a response stands. finish FINISH_NONE = still in progress. */
typedef struct {
    const char *text; /* generated text so far, len bytes (may be NULL) */
    size_t len;
    finish_reason finish;
    const srv_usage *usage;     /* NULL = null (in progress) */
    const srv_error *fail;      /* non-NULL: the response failed with this error */
    const srv_timings *timings; /* NULL = left out */
} srv_responses_state;

/* The Response object of a finished request (heap JSON): status
 * "completed", or "incomplete" with incomplete_details.reason
 * "max_output_tokens" when the length limit ended it. */
char *srv_responses_body(const srv_responses_meta *m, const srv_responses_state *st);

/* Stream events, appended to out as complete SSE events; *seq is the next
 * sequence_number and advances by one per event. */
void srv_responses_stream_begin(inferd_buf *out, const srv_responses_meta *m, int *seq);
void srv_responses_stream_delta(inferd_buf *out, const srv_responses_meta *m, int *seq, const char *text,
                                size_t len);
/* The closing events for a finished (st->finish) or failed (st->fail)
 * response; st->text is the whole generated text. */
void srv_responses_stream_end(inferd_buf *out, const srv_responses_meta *m, int *seq,
                              const srv_responses_state *st);

#endif
