/* server/srv_gen.h: one generation request (/v1/completions,
 * /v1/chat/completions or /v1/responses) from validated body to finished
 * response: n choices per prompt (each prompt of a batched completions
 * request, or the chat conversation, is one engine group of best_of
 * sequences sharing the prompt's KV blocks).
 *
 * The HTTP layer owns the connection; this module owns the request: it
 * builds the prompt (tokenizer, chat template), checks it against the model
 * length, submits it to the engine, and turns engine output into either one
 * JSON body or a sequence of SSE events. It never blocks: srv_gen_pump takes
 * whatever output is there, and the engine's notify callback (passed in by
 * the HTTP layer) says when to pump again.
 */
#ifndef INFERD_SERVER_SRV_GEN_H
#define INFERD_SERVER_SRV_GEN_H

#include <stdbool.h>
#include <stddef.h>

#include "server/srv_errors.h"
#include "server/srv_openai.h"
#include "server/srv_server.h"

typedef struct srv_gen srv_gen;

/* Parse, validate, build the prompt and submit. NULL with *err set (400,
 * 404, 429, 503, ...) when the request is refused; nothing is left running.
 * notify(notify_user) is called from the engine thread when output arrives. */
srv_gen *srv_gen_start(srv_server *s, srv_api api, const char *body, size_t len, double t_recv,
                       void (*notify)(void *), void *notify_user, srv_error *err);

bool srv_gen_is_stream(const srv_gen *g);

/* Take all available engine output; true once the request has finished.
 * Streaming requests append SSE events to the pending output. */
bool srv_gen_pump(srv_gen *g);

/* Non-streaming, finished: the response body (heap) and its HTTP status
 * (200, or the error's status when it was aborted or failed). */
char *srv_gen_response(srv_gen *g, int *http_status);

/* Streaming: copy up to max pending SSE bytes into buf; returns the count.
 * *done is set once everything including "data: [DONE]" has been taken. */
size_t srv_gen_sse_read(srv_gen *g, char *buf, size_t max, bool *done);

/* Ask the engine to abort (idempotent); the request then finishes with an
 * error body / error event. */
void srv_gen_abort(srv_gen *g);

/* Release the engine stream (aborting if unfinished) and free. */
void srv_gen_free(srv_gen *g);

/* For the access log: the request's totals over its choices. */
typedef struct {
    const char *id;
    int prompt_tokens, completion_tokens;
    double ttft_ms, total_ms;
    const char *finish; /* "stop", "length", "abort", "error", "none"; the worst of its choices' */
} srv_gen_summary;

void srv_gen_get_summary(const srv_gen *g, srv_gen_summary *out);

#endif
